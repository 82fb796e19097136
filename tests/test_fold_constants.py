import numpy as np
import pytest
from control_flow_graphs import (
    LOOP_FORMS,
    assert_control_flow_kept,
    cond_graph,
    feeds_for_both_branches,
    while_graph,
)
from graph_testing import (
    assert_idempotent,
    assert_same_outputs,
    build_graph,
    context,
    op_counts,
    tf,
)

from tfopt.optimizer.graph.consts import values_from_const
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.base import TransformRefused
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

# A tiny graph folds with the same CPU kernels it runs with, so values match to float noise.
ATOL_SMALL = 1e-6
# Real models: folding may reassociate float32 arithmetic (e.g. oneDNN vs. plain kernels).
ATOL_MODEL = 1e-5


def _constant_chain_into_matmul(with_placeholder_in_chain=False):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        base = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2), name="base")
        if with_placeholder_in_chain:
            scale = tf.compat.v1.placeholder_with_default(np.float32(0.5), [], name="scale")
        else:
            scale = tf.constant(0.5, name="scale")
        weights = tf.add(base * scale, tf.constant(1.0, name="shift"), name="weights")
        tf.matmul(x, weights, name="y")
    return build_graph(body)


def _by_name(graph_def):
    return {n.name: n for n in graph_def.node}


def _feeds():
    return {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}


def test_fold_constants_folds_a_constant_chain_into_one_const_of_the_same_name():
    graph = _constant_chain_into_matmul()
    folded = make_transform("fold_constants")(graph, context(["x"], ["y"]))

    counts = op_counts(folded)
    assert counts["Mul"] == 0 and counts["AddV2"] == 0 and counts["Const"] == 1
    weights = _by_name(folded)["weights"]
    assert weights.op == "Const" and list(_by_name(folded)["y"].input) == ["x", "weights"]
    np.testing.assert_allclose(values_from_const(weights),
                               np.arange(6, dtype=np.float32).reshape(3, 2) * 0.5 + 1.0,
                               atol=ATOL_SMALL)


def test_fold_constants_leaves_a_chain_with_a_placeholder_alone():
    graph = _constant_chain_into_matmul(with_placeholder_in_chain=True)
    folded = make_transform("fold_constants")(graph, context(["x"], ["y"]))
    assert op_counts(folded) == op_counts(graph)


def test_fold_constants_leaves_stateful_ops_alone():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        noise = tf.random.uniform([3], seed=1, name="noise")
        tf.add(x, noise * 2.0, name="y")
    graph = build_graph(body)
    folded = make_transform("fold_constants")(graph, context(["x"], ["y"]))
    assert op_counts(folded)["RandomUniform"] == 1 and op_counts(folded)["Mul"] == 1


def test_fold_constants_keeps_outputs_equal():
    graph = _constant_chain_into_matmul()
    folded = make_transform("fold_constants")(graph, context(["x"], ["y"]))
    assert_same_outputs(graph, folded, _feeds(), ["y"], atol=ATOL_SMALL)


def test_fold_constants_gives_each_used_output_of_a_multi_output_node_its_own_const():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        halves = tf.split(tf.constant(np.arange(8, dtype=np.float32).reshape(2, 4)), 2, axis=1,
                          name="halves")
        tf.matmul(x, halves[1], name="y")
    graph = build_graph(body)
    folded = make_transform("fold_constants")(graph, context(["x"], ["y"]))

    assert op_counts(folded)["Split"] == 0
    assert list(_by_name(folded)["y"].input) == ["x", "halves__folded_1"]
    feeds = {"x": np.ones((3, 2), np.float32)}
    assert_same_outputs(graph, folded, feeds, ["y"], atol=ATOL_SMALL)


def _graph_with_a_failing_constant():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        bad = tf.strings.to_number(tf.constant(["not a number"]), name="bad")
        good = tf.multiply(tf.constant(2.0), tf.constant(3.0), name="good")
        tf.identity(x * good + bad, name="y")
    return build_graph(body)


def test_fold_constants_names_the_node_it_cannot_evaluate():
    with pytest.raises(TransformRefused, match="'bad'"):
        make_transform("fold_constants")(_graph_with_a_failing_constant(), context(["x"], ["y"]))


def test_fold_constants_ignore_errors_skips_only_the_failing_node():
    folded = make_transform("fold_constants", ignore_errors=True)(
        _graph_with_a_failing_constant(), context(["x"], ["y"]))
    by_name = _by_name(folded)
    assert by_name["bad"].op == "StringToNumber"
    assert by_name["good"].op == "Const" and values_from_const(by_name["good"]) == 6.0


def test_fold_constants_clears_output_shapes_unless_told_not_to():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.nn.relu(x + tf.constant(1.0) * 2.0, name="y")
    with_shapes = graph.as_graph_def(add_shapes=True)
    ctx = context(["x"], ["y"])

    cleared = make_transform("fold_constants")(with_shapes, ctx)
    kept = make_transform("fold_constants", clear_output_shapes=False)(with_shapes, ctx)
    assert not any("_output_shapes" in n.attr for n in cleared.node)
    assert "_output_shapes" in _by_name(kept)["y"].attr


def test_fold_constants_folds_nothing_inside_lowered_control_flow():
    for lowered in (cond_graph(), while_graph()):
        folded = make_transform("fold_constants")(
            lowered.graph_def, context(lowered.input_nodes, lowered.output_nodes))
        before = {n.name for n in lowered.graph_def.node if n.op == "Const" and n.input}
        after = _by_name(folded)
        assert before and all(name in after and list(after[name].input) for name in before)
        for feeds in feeds_for_both_branches():
            assert_same_outputs(lowered.graph_def, folded, feeds, list(lowered.outputs),
                                atol=ATOL_SMALL)


def test_fold_constants_twice_changes_nothing():
    assert_idempotent(make_transform("fold_constants"), _constant_chain_into_matmul(),
                      context(["x"], ["y"]))
    assert_idempotent(make_transform("fold_constants", ignore_errors=True),
                      _graph_with_a_failing_constant(), context(["x"], ["y"]))


def test_fold_constants_shrinks_a_frozen_cnn_without_changing_it(model_dir):
    model = freeze(model_dir("keras_cnn"))
    folded, _ = run_transforms(model, [make_transform("fold_constants")])

    assert len(folded.graph_def.node) < len(model.graph_def.node)
    assert op_counts(folded.graph_def)["Rsqrt"] == 0  # batch-norm scale computed once
    report = compare(model, folded)
    assert report.max_abs_diff <= ATOL_MODEL, report.summary()


@pytest.mark.parametrize(**LOOP_FORMS)
def test_fold_constants_keeps_a_frozen_lstm_correct(model_dir, lowered):
    model = freeze(model_dir("keras_lstm"), lower_control_flow=lowered)
    folded, _ = run_transforms(model, [make_transform("fold_constants")])

    assert len(folded.graph_def.node) < len(model.graph_def.node)
    assert_control_flow_kept(model.graph_def, folded.graph_def)
    report = compare(model, folded)
    assert report.max_abs_diff <= ATOL_MODEL, report.summary()
