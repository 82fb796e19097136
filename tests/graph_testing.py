"""Helpers for transform tests: build tiny graphs by hand, run them before and after a rewrite.

A test builds the smallest graph that shows the pattern (with ``tf.compat.v1`` ops inside
``build_graph``), applies a transform, and checks three things: the pattern was rewritten (op
counts), the outputs are unchanged (``assert_same_outputs``), and a second run changes nothing.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np

from tfopt.optimizer.tf_runtime import import_tensorflow
from tfopt.optimizer.transforms.base import Transform, TransformContext

tf = import_tensorflow()


def build_graph(body: Callable[[], None]):
    """GraphDef of whatever ``body`` creates in a fresh v1 graph."""
    graph = tf.Graph()
    with graph.as_default():
        body()
    return graph.as_graph_def()


def run_graph(graph_def, feeds: dict[str, np.ndarray], fetches: list[str]) -> list[np.ndarray]:
    """Run ``graph_def`` in a session; names may be ``node`` or ``node:i``."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    def tensor(name: str) -> str:
        return name if ":" in name else f"{name}:0"
    with tf.compat.v1.Session(graph=graph) as session:
        return session.run([tensor(f) for f in fetches],
                           feed_dict={tensor(k): v for k, v in feeds.items()})


def assert_same_outputs(before, after, feeds, fetches, atol=1e-5, rtol=0.0):
    expected = run_graph(before, feeds, fetches)
    actual = run_graph(after, feeds, fetches)
    for name, e, a in zip(fetches, expected, actual):
        np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, err_msg=f"output {name}")


def op_counts(graph_def) -> collections.Counter:
    return collections.Counter(n.op for n in graph_def.node)


def context(inputs=(), outputs=(), protected=()) -> TransformContext:
    return TransformContext(tuple(inputs), tuple(outputs), frozenset(protected))


def apply_twice(transform: Transform, graph_def, ctx: TransformContext):
    """Run a transform twice; returns (once, twice) so tests can assert idempotence."""
    once = transform(graph_def, ctx)
    twice = transform(once, ctx)
    return once, twice


def assert_idempotent(transform: Transform, graph_def, ctx: TransformContext):
    once, twice = apply_twice(transform, graph_def, ctx)
    assert once.SerializeToString(deterministic=True) == \
        twice.SerializeToString(deterministic=True), f"{transform.name} is not idempotent"
    return once
