"""unroll_static_loops: a While with a constant trip count becomes straight-line ops, exactly.

Unrolling runs the same ops on the same values in the same order (a loop's trips are
sequential), so the outputs must be identical, not merely close: every comparison here is
against a tolerance of 0.
"""

import logging

import numpy as np
import pytest
from control_flow_graphs import counted_loop_graph, input_bounded_loop_graph
from graph_testing import assert_idempotent, assert_same_outputs, context, op_counts

from tfopt.optimizer.graph.functional_control_flow import FUNCTIONAL_CONTROL_FLOW_OPS
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

TENSOR_LIST_OPS = {"TensorListReserve", "TensorListFromTensor", "TensorListGetItem",
                   "TensorListSetItem", "TensorListStack"}


def _feeds(graph, seed=0):
    return {graph.inputs[0]: np.random.default_rng(seed).normal(size=(4, 2, 3))
            .astype(np.float32)}


def test_a_counted_loop_becomes_one_copy_of_its_body_per_trip():
    graph = counted_loop_graph(trips=4)
    ctx = context(graph.input_nodes, graph.output_nodes)
    unrolled = make_transform("unroll_static_loops")(graph.graph_def, ctx)

    counts = op_counts(unrolled)
    assert counts["Mul"] == 4 and counts["AddV2"] == 4
    assert not (FUNCTIONAL_CONTROL_FLOW_OPS | TENSOR_LIST_OPS) & set(counts)
    assert counts["Pack"] == 1  # the TensorArray's stack: the four steps' values
    assert not unrolled.library.function  # the cond and body went with the loop
    for seed in range(2):
        assert_same_outputs(graph.graph_def, unrolled, _feeds(graph, seed), list(graph.outputs),
                            atol=0)


def test_unrolling_twice_changes_nothing():
    graph = counted_loop_graph(trips=3)
    assert_idempotent(make_transform("unroll_static_loops"), graph.graph_def,
                      context(graph.input_nodes, graph.output_nodes))


@pytest.mark.parametrize("model", ["keras_lstm", "keras_gru"])
def test_keras_recurrent_layers_unroll_exactly(model_dir, model):
    frozen = freeze(model_dir(model))
    unrolled, _ = run_transforms(frozen, [make_transform("unroll_static_loops")])

    ops = unrolled.op_counts()
    assert not (FUNCTIONAL_CONTROL_FLOW_OPS | TENSOR_LIST_OPS) & set(ops), ops
    assert not unrolled.graph_def.library.function
    # 12 (LSTM) or 7 (GRU) steps x 2 layers, two matrix products per step, and the Dense.
    steps = 12 if model == "keras_lstm" else 7
    assert ops["MatMul"] == 2 * 2 * steps + 1
    report = compare(frozen, unrolled, batches=3, batch_size=4)
    assert report.max_abs_diff == 0, report.summary()


def test_a_loop_bounded_by_an_input_stays_a_loop_with_a_warning(caplog):
    graph = input_bounded_loop_graph()
    ctx = context(graph.input_nodes, graph.output_nodes)
    with caplog.at_level(logging.WARNING, logger="tfopt.optimizer.transforms"):
        kept = make_transform("unroll_static_loops")(graph.graph_def, ctx)

    assert kept == graph.graph_def
    [warning] = [r.getMessage() for r in caplog.records if "keeping loop" in r.getMessage()]
    assert "data-dependent" in warning and "'n'" in warning
    feeds = {"x:0": np.ones((2, 3), np.float32), "n:0": np.int32(3)}
    assert_same_outputs(graph.graph_def, kept, feeds, list(graph.outputs), atol=0)


def test_a_loop_larger_than_the_node_cap_stays_a_loop_with_a_warning(caplog):
    graph = counted_loop_graph(trips=50)
    ctx = context(graph.input_nodes, graph.output_nodes)
    with caplog.at_level(logging.WARNING, logger="tfopt.optimizer.transforms"):
        kept = make_transform("unroll_static_loops", max_nodes=100)(graph.graph_def, ctx)

    assert op_counts(kept)["StatelessWhile"] == 1
    assert any("more than 100 nodes" in r.getMessage() for r in caplog.records)


def test_a_loop_with_a_stateful_body_stays_a_loop(caplog):
    graph = counted_loop_graph(trips=3, stateful=True)
    ctx = context(graph.input_nodes, graph.output_nodes)
    with caplog.at_level(logging.WARNING, logger="tfopt.optimizer.transforms"):
        kept = make_transform("unroll_static_loops")(graph.graph_def, ctx)

    assert {"While", "StatelessWhile"} & set(op_counts(kept))
    assert any("stateful op(s) RandomUniform" in r.getMessage() for r in caplog.records)
