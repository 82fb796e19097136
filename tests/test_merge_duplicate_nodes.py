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
    run_graph,
    tf,
)

from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

# Merging identical nodes only rewires edges: the outputs must match up to float noise.
ATOL = 1e-6


def _duplicated_subexpression():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        scale_a = tf.constant([1.0, 2.0, 3.0], name="scale_a")
        scale_b = tf.constant([1.0, 2.0, 3.0], name="scale_b")
        first = tf.nn.relu(x * scale_a, name="first")
        second = tf.nn.relu(x * scale_b, name="second")
        tf.identity(first + second, name="y")
    return build_graph(body)


def _by_name(graph_def):
    return {n.name: n for n in graph_def.node}


def _feeds():
    return {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}


def test_merge_duplicate_nodes_merges_equal_consts_then_what_they_made_equal():
    graph = _duplicated_subexpression()
    merged = make_transform("merge_duplicate_nodes")(graph, context(["x"], ["y"]))

    counts = op_counts(merged)
    assert counts["Const"] == 1 and counts["Mul"] == 1 and counts["Relu"] == 1
    names = set(_by_name(merged))
    assert {"scale_a", "first"} <= names and not {"scale_b", "second"} & names
    assert list(_by_name(merged)["add"].input) == ["first", "first"]


def test_merge_duplicate_nodes_compares_consts_by_value_not_by_encoding():
    graph = _duplicated_subexpression()
    by_name = _by_name(graph)
    tensor = by_name["scale_b"].attr["value"].tensor
    tensor.ClearField("tensor_content")
    tensor.float_val.extend([1.0, 2.0, 3.0])
    assert by_name["scale_b"].attr["value"] != by_name["scale_a"].attr["value"]

    merged = make_transform("merge_duplicate_nodes")(graph, context(["x"], ["y"]))
    assert op_counts(merged)["Const"] == 1


def test_merge_duplicate_nodes_leaves_near_misses_alone():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [3, 3], name="x")
        other = tf.compat.v1.placeholder(tf.float32, [3, 3], name="other")  # same attrs as x
        w = tf.constant(np.eye(3, dtype=np.float32), name="w")
        plain = tf.matmul(x, w, name="plain")
        transposed = tf.matmul(x, w, transpose_a=True, name="transposed")  # differs in one attr
        noise_a = tf.random.uniform([3, 3], seed=1, name="noise_a")  # stateful: two draws
        noise_b = tf.random.uniform([3, 3], seed=1, name="noise_b")
        tf.identity(plain + transposed + noise_a + noise_b + other, name="y")
    graph = build_graph(body)
    merged = make_transform("merge_duplicate_nodes")(graph, context(["x", "other"], ["y"]))

    names = set(_by_name(merged))
    assert {"x", "other", "plain", "transposed"} <= names
    assert op_counts(merged)["RandomUniform"] == 2


def test_merge_duplicate_nodes_never_drops_a_boundary_node():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.nn.relu(x, name="hidden_copy")
        tf.nn.relu(x, name="y")
        tf.nn.relu(x, name="z")
    graph = build_graph(body)
    merged = make_transform("merge_duplicate_nodes")(graph, context(["x"], ["y", "z"]))

    # Both outputs stay even though they are equal; the copy before them merges into y.
    assert set(_by_name(merged)) == {"x", "y", "z"}
    assert_same_outputs(graph, merged, _feeds(), ["y", "z"], atol=ATOL)


def test_merge_duplicate_nodes_keeps_outputs_equal():
    graph = _duplicated_subexpression()
    merged = make_transform("merge_duplicate_nodes")(graph, context(["x"], ["y"]))
    assert_same_outputs(graph, merged, _feeds(), ["y"], atol=ATOL)


def test_merge_duplicate_nodes_redirects_colocation_on_a_dropped_copy():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        tf.math.exp(x, name="kept")
        dropped = tf.math.exp(x, name="dropped")
        with tf.compat.v1.get_default_graph().colocate_with(dropped):
            tf.math.negative(dropped, name="y")
    graph = build_graph(body)
    merged = make_transform("merge_duplicate_nodes")(graph, context(["x"], ["y"]))

    assert list(_by_name(merged)["y"].attr["_class"].list.s) == [b"loc:@kept"]
    run_graph(merged, {"x": np.ones(2, np.float32)}, ["y"])  # imports: no dangling colocation


def test_merge_duplicate_nodes_keeps_lowered_control_flow_correct():
    for lowered in (cond_graph(), while_graph()):
        merged = make_transform("merge_duplicate_nodes")(
            lowered.graph_def, context(lowered.input_nodes, lowered.output_nodes))
        for feeds in feeds_for_both_branches():
            assert_same_outputs(lowered.graph_def, merged, feeds, list(lowered.outputs),
                                atol=ATOL)


def test_merge_duplicate_nodes_twice_changes_nothing():
    assert_idempotent(make_transform("merge_duplicate_nodes"), _duplicated_subexpression(),
                      context(["x"], ["y"]))


@pytest.mark.parametrize(**LOOP_FORMS)
def test_merge_duplicate_nodes_shrinks_a_frozen_lstm_without_changing_it(model_dir, lowered):
    model = freeze(model_dir("keras_lstm"), lower_control_flow=lowered)
    merged, _ = run_transforms(model, [make_transform("merge_duplicate_nodes")])

    assert len(merged.graph_def.node) < len(model.graph_def.node)
    assert_control_flow_kept(model.graph_def, merged.graph_def)
    report = compare(model, merged)
    assert report.max_abs_diff <= ATOL, report.summary()
