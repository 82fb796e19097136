"""merge_parallel_matmuls: MatMuls sharing input A become one MatMul followed by a SplitV."""

import numpy as np
import pytest
from graph_testing import assert_same_outputs, build_graph, context, op_counts, tf
from parallel_blocks import frozen_keras_branches

from tfopt.optimizer.search.rules.merge_parallel_matmuls import MergeParallelMatmuls

RULE = MergeParallelMatmuls()
CTX = context(["x"], ["q", "k", "v"])
# The merged product does the same multiply-adds per output column; float32 reordering only.
ATOL = 1e-5


def projections(transpose_b_v=False, transpose_a_v=False, const_v=True, rows_v=8, bias=False):
    """Attention-style q/k/v projections of one input ``x`` ([4, 8])."""
    def body():
        rng = np.random.default_rng(0)
        x = tf.compat.v1.placeholder(tf.float32, [4, 8], name="x")
        xt = tf.transpose(x, name="xt")
        outputs = {}
        for name, cols in (("q", 5), ("k", 3), ("v", 7)):
            transpose_b = name == "v" and transpose_b_v
            transpose_a = name == "v" and transpose_a_v
            rows = rows_v if name == "v" else 8
            shape = (cols, rows) if transpose_b else (rows, cols)
            value = rng.normal(size=shape).astype(np.float32)
            w = tf.constant(value, name=f"w_{name}") if const_v or name != "v" else \
                tf.compat.v1.placeholder_with_default(value, shape, name=f"w_{name}")
            a = xt if transpose_a else x
            y = tf.linalg.matmul(a, w, transpose_a=transpose_a, transpose_b=transpose_b,
                                 name=f"{name}_mm" if bias else name)
            if bias:
                y = tf.nn.bias_add(y, tf.constant(rng.normal(size=cols).astype(np.float32)),
                                   name=name)
            outputs[name] = y
    return build_graph(body)


def feeds():
    return {"x": np.random.default_rng(1).normal(size=(4, 8)).astype(np.float32)}


def test_matches_matmuls_sharing_input_a():
    assert [m.nodes for m in RULE.matches(projections(), CTX)] == [("q", "k", "v")]


def test_apply_makes_one_matmul_and_a_splitv_along_axis_1():
    graph = projections()
    merged = RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    counts = op_counts(merged)
    assert counts["MatMul"] == 1 and counts["SplitV"] == 1 and counts["Identity"] == 3
    nodes = {n.name: n for n in merged.node}
    assert tf.make_ndarray(nodes["q_merged/weights"].attr["value"].tensor).shape == (8, 15)
    assert tf.make_ndarray(nodes["q_merged_split/split_dim"].attr["value"].tensor) == 1
    assert_same_outputs(graph, merged, feeds(), ["q", "k", "v"], atol=ATOL)


def test_dense_layers_biases_are_merged_too():
    graph = projections(bias=True)
    found = RULE.matches(graph, CTX)
    assert [m.nodes for m in found] == [("q_mm", "k_mm", "v_mm")] and found[0].detail["with_bias"]
    merged = RULE.apply(graph, found[0], CTX)
    assert op_counts(merged)["MatMul"] == 1 and op_counts(merged)["BiasAdd"] == 1
    assert_same_outputs(graph, merged, feeds(), ["q", "k", "v"], atol=ATOL)


@pytest.mark.parametrize("near_miss", [
    {"transpose_b_v": True}, {"transpose_a_v": True}, {"const_v": False}],
    ids=["transpose_b", "other input A", "non-const B"])
def test_matmul_that_differs_is_left_out_of_the_group(near_miss):
    assert [m.nodes for m in RULE.matches(projections(**near_miss), CTX)] == [("q", "k")]


def test_a_single_matmul_is_not_a_match():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [4, 8], name="x")
        tf.linalg.matmul(x, tf.ones([8, 2]), name="q")
        tf.linalg.matmul(x, tf.compat.v1.placeholder(tf.float32, [8, 2]), name="k")
    assert RULE.matches(build_graph(body), context(["x"], ["q", "k"])) == []


def test_apply_does_not_modify_its_input():
    graph = projections(bias=True)
    before = graph.SerializeToString(deterministic=True)
    RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    assert graph.SerializeToString(deterministic=True) == before


def dense_blocks():
    """Inception-style: three Dense branches of x concatenated; ResNet-style: a Dense projection
    shortcut beside the main branch's first Dense layer."""
    rng = np.random.default_rng(2)

    def dense(v, units, name, relu=True):
        w = tf.constant(rng.normal(size=(v.shape[-1], units)).astype(np.float32))
        y = tf.nn.bias_add(tf.linalg.matmul(v, w, name=name),
                           tf.constant(rng.normal(size=units).astype(np.float32)),
                           name=f"{name}/bias")
        return tf.nn.relu(y) if relu else y

    x = tf.compat.v1.placeholder(tf.float32, [4, 8], name="x")
    tf.concat([dense(x, 4, "branch1"), dense(x, 6, "branch2"), dense(x, 2, "branch3")], 1,
              name="inception_out")
    main = dense(dense(x, 5, "main_a"), 3, "main_b", relu=False)
    tf.nn.relu(dense(x, 3, "shortcut", relu=False) + main, name="resnet_out")


def test_inception_and_resnet_style_dense_blocks_merge_and_stay_equal():
    graph = build_graph(dense_blocks)
    ctx = context(["x"], ["inception_out", "resnet_out"])
    found = RULE.matches(graph, ctx)
    assert [m.nodes for m in found] == [("branch1", "branch2", "branch3", "main_a", "shortcut")]
    merged = RULE.apply(graph, found[0], ctx)
    assert op_counts(merged)["MatMul"] == 2
    assert_same_outputs(graph, merged, feeds(), ["inception_out", "resnet_out"], atol=ATOL)


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory):
    return frozen_keras_branches(tmp_path_factory.mktemp("keras_branches"))


def test_frozen_keras_dense_heads_merge_and_outputs_unchanged(keras_model):
    graph, ctx, inputs = keras_model
    found = RULE.matches(graph, ctx)
    assert len(found) == 1 and len(found[0].nodes) == 2 and found[0].detail["with_bias"]
    merged = RULE.apply(graph, found[0], ctx)
    assert op_counts(merged)["MatMul"] == 1
    assert op_counts(merged)["BiasAdd"] == op_counts(graph)["BiasAdd"] - 1
    assert_same_outputs(graph, merged, inputs, list(ctx.output_names), atol=ATOL)
