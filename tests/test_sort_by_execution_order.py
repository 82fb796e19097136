import numpy as np
import pytest
from control_flow_graphs import (
    LOOP_FORMS,
    cond_graph,
    feeds_for_both_branches,
    while_graph,
)
from graph_testing import assert_idempotent, assert_same_outputs, build_graph, context, tf
from tensorflow.core.framework import graph_pb2

from tfopt.optimizer.graph.control_flow import MERGE_OPS, NEXT_ITERATION_OPS
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.base import TransformRefused
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

# Reordering nodes changes no computation: the outputs must match up to float noise.
ATOL = 1e-6


def _small_graph():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        w = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2), name="w")
        h = tf.nn.relu(tf.matmul(x, w) + 1.0, name="h")
        tf.identity(tf.reduce_sum(h, axis=1) * tf.reduce_max(h, axis=1), name="y")
    return build_graph(body)


def _shuffled(graph_def, seed=0):
    shuffled = graph_pb2.GraphDef()
    shuffled.CopyFrom(graph_def)
    order = np.random.default_rng(seed).permutation(len(graph_def.node))
    del shuffled.node[:]
    shuffled.node.extend(graph_def.node[int(i)] for i in order)
    return shuffled


def _out_of_order(graph_def) -> list[str]:
    """Nodes that come before one of their inputs (a loop's NextIteration may come later)."""
    position = {n.name: i for i, n in enumerate(graph_def.node)}
    ops = {n.name: n.op for n in graph_def.node}
    late = []
    for i, node in enumerate(graph_def.node):
        for inp in node.input:
            source = inp.lstrip("^").split(":")[0]
            back_edge = node.op in MERGE_OPS and ops[source] in NEXT_ITERATION_OPS
            if position[source] > i and not back_edge:
                late.append(node.name)
    return late


def _feeds():
    return {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}


def test_sort_by_execution_order_puts_every_node_after_its_inputs():
    shuffled = _shuffled(_small_graph())
    assert _out_of_order(shuffled)

    ordered = make_transform("sort_by_execution_order")(shuffled, context(["x"], ["y"]))

    assert _out_of_order(ordered) == []
    assert sorted(n.name for n in ordered.node) == sorted(n.name for n in shuffled.node)


def test_sort_by_execution_order_leaves_a_sorted_graph_unchanged():
    graph = _small_graph()
    assert _out_of_order(graph) == []
    ordered = make_transform("sort_by_execution_order")(graph, context(["x"], ["y"]))
    assert ordered.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_sort_by_execution_order_keeps_outputs_equal():
    shuffled = _shuffled(_small_graph())
    ordered = make_transform("sort_by_execution_order")(shuffled, context(["x"], ["y"]))
    assert_same_outputs(shuffled, ordered, _feeds(), ["y"], atol=ATOL)


def test_sort_by_execution_order_lets_next_iteration_come_after_its_merge():
    lowered = while_graph()
    shuffled = _shuffled(lowered.graph_def, seed=1)
    ordered = make_transform("sort_by_execution_order")(
        shuffled, context(lowered.input_nodes, lowered.output_nodes))

    assert _out_of_order(ordered) == []
    position = {n.name: i for i, n in enumerate(ordered.node)}
    merges = [n for n in ordered.node if n.op in MERGE_OPS]
    assert merges and all(position[m.input[1]] > position[m.name] for m in merges)
    for feeds in feeds_for_both_branches():
        assert_same_outputs(lowered.graph_def, ordered, feeds, list(lowered.outputs), atol=ATOL)


def test_sort_by_execution_order_puts_a_cond_merge_after_both_branches():
    lowered = cond_graph()
    ordered = make_transform("sort_by_execution_order")(
        _shuffled(lowered.graph_def, seed=2), context(lowered.input_nodes, lowered.output_nodes))
    assert _out_of_order(ordered) == []
    for feeds in feeds_for_both_branches():
        assert_same_outputs(lowered.graph_def, ordered, feeds, list(lowered.outputs), atol=ATOL)


def test_sort_by_execution_order_refuses_a_cycle_that_is_not_a_loop():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        tf.identity(tf.identity(x, name="a"), name="b")
    graph = build_graph(body)
    by_name = {n.name: n for n in graph.node}
    by_name["a"].input[0] = "b"
    with pytest.raises(TransformRefused, match="cycle"):
        make_transform("sort_by_execution_order")(graph, context(["x"], ["b"]))


def test_sort_by_execution_order_twice_changes_nothing():
    assert_idempotent(make_transform("sort_by_execution_order"), _shuffled(_small_graph()),
                      context(["x"], ["y"]))
    lowered = while_graph()
    assert_idempotent(make_transform("sort_by_execution_order"), _shuffled(lowered.graph_def),
                      context(lowered.input_nodes, lowered.output_nodes))


@pytest.mark.parametrize(**LOOP_FORMS)
def test_sort_by_execution_order_keeps_a_shuffled_frozen_lstm_running(model_dir, lowered):
    model = freeze(model_dir("keras_lstm"), lower_control_flow=lowered)
    shuffled = model.with_graph(_shuffled(model.graph_def, seed=3))
    ordered, _ = run_transforms(shuffled, [make_transform("sort_by_execution_order")])

    assert _out_of_order(ordered.graph_def) == []
    report = compare(model, ordered)
    assert report.max_abs_diff <= ATOL, report.summary()
