"""Small graphs with control flow, frozen the way ``freeze`` does it, and checks that a
transform left a frozen model's loops and conds alone.

``convert_variables_to_constants_v2(..., lower_control_flow=True)`` turns a tf.function's
``If``/``While`` into Switch/Merge and Enter/Merge/Switch/NextIteration/Exit, with the pivots
and control inputs that form depends on: the shapes of graph transforms most easily break.
With ``lower=False`` they stay functional (While/If calling library functions), as ``freeze``
keeps them by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from graph_testing import op_counts, tf

from tfopt.optimizer.graph.control_flow import CONTROL_FLOW_OPS
from tfopt.optimizer.graph.functional_control_flow import FUNCTIONAL_CONTROL_FLOW_OPS, lower_at_load

# Both forms a frozen model's loops can take: ``freeze(..., lower_control_flow=lowered)``.
LOOP_FORMS = {"argnames": "lowered", "argvalues": [False, True], "ids": ["functional", "lowered"]}


@dataclass(frozen=True)
class LoweredGraph:
    graph_def: object
    inputs: tuple[str, ...]  # tensor names, e.g. "x:0"
    outputs: tuple[str, ...]

    @property
    def input_nodes(self) -> list[str]:
        return [name.split(":")[0] for name in self.inputs]

    @property
    def output_nodes(self) -> list[str]:
        return [name.split(":")[0] for name in self.outputs]


def freeze_function(fn, *specs, lower: bool = True) -> LoweredGraph:
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    concrete = tf.function(fn).get_concrete_function(*specs)
    frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=lower)
    graph_def = frozen.graph.as_graph_def()
    if not lower:
        lower_at_load(graph_def)
    return LoweredGraph(graph_def, tuple(t.name for t in frozen.inputs),
                        tuple(t.name for t in frozen.outputs))


def assert_control_flow_kept(before, after) -> None:
    """``after`` has the loops and conds of ``before``: as many control-flow ops of each kind
    (v1 and functional), and its library's functions unchanged."""
    counted = CONTROL_FLOW_OPS | FUNCTIONAL_CONTROL_FLOW_OPS
    a, b = op_counts(before), op_counts(after)
    assert {op: a[op] for op in counted if a[op]} == {op: b[op] for op in counted if b[op]}
    assert before.library == after.library


def cond_graph() -> LoweredGraph:
    """``sum(x) > 0 ? sum(2x) : 7`` plus 1; the false branch is a Const held by its pivot."""
    def fn(x):
        picked = tf.cond(tf.reduce_sum(x) > 0,
                         lambda: tf.reduce_sum(tf.identity(x) * 2.0),
                         lambda: tf.constant(7.0))
        return tf.identity(picked + 1.0)
    return freeze_function(fn, tf.TensorSpec([None, 3], tf.float32, name="x"))


def while_graph() -> LoweredGraph:
    """Four times ``a = 0.5 * a + 1`` in a while loop, then ``a * 3``."""
    def fn(x):
        _, result = tf.while_loop(lambda i, a: i < 4,
                                  lambda i, a: (i + 1, tf.identity(a) * 0.5 + 1.0),
                                  [tf.constant(0), x])
        return tf.identity(result * 3.0)
    return freeze_function(fn, tf.TensorSpec([None, 3], tf.float32, name="x"))


def feeds_for_both_branches() -> list[dict[str, np.ndarray]]:
    """One batch per branch of ``cond_graph``: positive sum, then negative sum."""
    rng = np.random.default_rng(0)
    positive = np.abs(rng.standard_normal((2, 3))).astype(np.float32)
    return [{"x": positive}, {"x": -positive}]


def counted_loop_graph(trips: int = 4, stateful: bool = False) -> LoweredGraph:
    """A functional While of ``trips`` steps, ``a = 0.5 * a + x[t]``, writing every step's
    ``a`` into a TensorArray that is stacked after the loop (as a Keras RNN does)."""
    def fn(x):
        steps = tf.TensorArray(tf.float32, size=trips)
        sequence = tf.TensorArray(tf.float32, size=trips).unstack(x)

        def body(t, a, written):
            step = sequence.read(t)
            if stateful:
                step += tf.random.uniform(tf.shape(step))
            a = tf.identity(a) * 0.5 + step
            return t + 1, a, written.write(t, a)

        _, last, written = tf.while_loop(lambda t, a, w: t < trips, body,
                                         [tf.constant(0), tf.zeros_like(x[0]), steps])
        return tf.identity(last, name="last"), tf.identity(written.stack(), name="all")
    return freeze_function(fn, tf.TensorSpec([trips, None, 3], tf.float32, name="x"),
                           lower=False)


def input_bounded_loop_graph() -> LoweredGraph:
    """A functional While that runs ``n`` times, ``n`` an input: its trip count is data."""
    def fn(x, n):
        _, result = tf.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * 0.5 + 1.0),
                                  [tf.constant(0), x])
        return tf.identity(result, name="y")
    return freeze_function(fn, tf.TensorSpec([None, 3], tf.float32, name="x"),
                           tf.TensorSpec([], tf.int32, name="n"), lower=False)
