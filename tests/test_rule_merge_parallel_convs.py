"""merge_parallel_convs: sibling Conv2Ds on one input become one Conv2D followed by a SplitV."""

import numpy as np
import pytest
from graph_testing import assert_same_outputs, build_graph, context, op_counts, tf
from parallel_blocks import (
    block_feeds,
    convs_in_while_loop,
    frozen_keras_branches,
    inception_block,
    resnet_block,
)

from tfopt.optimizer.search.rules.merge_parallel_convs import MergeParallelConvs

RULE = MergeParallelConvs()
CTX = context(["x"], ["a", "b"])
# Merging only regroups the same multiply-adds into one op; float32 sums may be reordered.
ATOL = 1e-5


def two_convs(kernel_b=3, strides_b=1, padding_b="SAME", const_b=True, bias=False):
    def body():
        rng = np.random.default_rng(0)
        x = tf.compat.v1.placeholder(tf.float32, [2, 7, 7, 3], name="x")
        wa = tf.constant(rng.normal(size=(3, 3, 3, 4)).astype(np.float32), name="wa")
        wb_value = rng.normal(size=(kernel_b, kernel_b, 3, 6)).astype(np.float32)
        wb = tf.constant(wb_value, name="wb") if const_b else \
            tf.compat.v1.placeholder_with_default(wb_value, wb_value.shape, name="wb")
        a = tf.nn.conv2d(x, wa, [1, 1, 1, 1], "SAME", name="a_conv" if bias else "a")
        b = tf.nn.conv2d(x, wb, [1, strides_b, strides_b, 1], padding_b,
                         name="b_conv" if bias else "b")
        if bias:
            tf.nn.bias_add(a, tf.constant(rng.normal(size=4).astype(np.float32)), name="a")
            tf.nn.bias_add(b, tf.constant(rng.normal(size=6).astype(np.float32)), name="b")
    return build_graph(body)


def feeds(shape=(2, 7, 7, 3)):
    return block_feeds(shape)


def test_matches_two_convs_reading_one_input_with_the_same_attrs():
    found = RULE.matches(two_convs(), CTX)
    assert [m.nodes for m in found] == [("a", "b")]
    assert found[0].detail["with_bias"] is False


def test_apply_makes_one_conv_with_concatenated_filters_and_a_splitv():
    graph = two_convs()
    merged = RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    counts = op_counts(merged)
    assert counts["Conv2D"] == 1 and counts["SplitV"] == 1 and counts["Identity"] == 2
    nodes = {n.name: n for n in merged.node}
    assert nodes["a"].op == nodes["b"].op == "Identity"
    assert nodes["a"].input[0] == "a_merged_split" and nodes["b"].input[0] == "a_merged_split:1"
    assert nodes["a_merged"].op == "Conv2D"
    sizes = tf.make_ndarray(nodes["a_merged_split/size_splits"].attr["value"].tensor)
    assert sizes.tolist() == [4, 6]
    assert "wa" not in nodes and "wb" not in nodes, "the unread filters are dropped"
    assert_same_outputs(graph, merged, feeds(), ["a", "b"], atol=ATOL)


def test_biasadds_with_constant_biases_are_merged_too():
    graph = two_convs(bias=True)
    found = RULE.matches(graph, CTX)
    assert [m.nodes for m in found] == [("a_conv", "b_conv")] and found[0].detail["with_bias"]
    merged = RULE.apply(graph, found[0], CTX)
    counts = op_counts(merged)
    assert counts["Conv2D"] == 1 and counts["BiasAdd"] == 1 and counts["SplitV"] == 1
    assert {n.name for n in merged.node if n.op == "Identity"} == {"a", "b"}
    assert_same_outputs(graph, merged, feeds(), ["a", "b"], atol=ATOL)


def test_a_conv_in_the_boundary_keeps_its_biasadd_separate():
    graph = two_convs(bias=True)
    ctx = context(["x"], ["a", "b", "a_conv"])
    found = RULE.matches(graph, ctx)
    assert found[0].detail["with_bias"] is False
    merged = RULE.apply(graph, found[0], ctx)
    assert op_counts(merged)["BiasAdd"] == 2
    assert_same_outputs(graph, merged, feeds(), ["a", "b", "a_conv"], atol=ATOL)


@pytest.mark.parametrize("near_miss", [
    {"kernel_b": 1}, {"strides_b": 2}, {"padding_b": "VALID"}, {"const_b": False}],
    ids=["other kernel size", "other strides", "other padding", "non-const filter"])
def test_convs_that_differ_are_left_alone(near_miss):
    assert RULE.matches(two_convs(**near_miss), CTX) == []


def test_convs_inside_a_while_loop_are_left_alone():
    # The merged filter would be a Const outside the loop's frame, which TF refuses to run.
    loop = convs_in_while_loop()
    ctx = context(loop.input_nodes, loop.output_nodes)
    assert sum(n.op == "Conv2D" for n in loop.graph_def.node) == 2
    assert RULE.matches(loop.graph_def, ctx) == []


def test_apply_does_not_modify_its_input():
    graph = two_convs(bias=True)
    before = graph.SerializeToString(deterministic=True)
    RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    assert graph.SerializeToString(deterministic=True) == before


def test_apply_is_deterministic():
    graph = two_convs()
    match = RULE.matches(graph, CTX)[0]
    assert RULE.apply(graph, match, CTX).SerializeToString(deterministic=True) == \
        RULE.apply(graph, match, CTX).SerializeToString(deterministic=True)


def test_inception_block_merges_the_1x1_convs_on_the_block_input():
    graph = build_graph(inception_block)
    ctx = context(["x"], ["out"])
    found = RULE.matches(graph, ctx)
    assert [m.nodes for m in found] == [("b1", "b2_reduce")]
    merged = RULE.apply(graph, found[0], ctx)
    assert op_counts(merged)["Conv2D"] == op_counts(graph)["Conv2D"] - 1
    assert_same_outputs(graph, merged, block_feeds(), ["out"], atol=ATOL)


@pytest.mark.parametrize("strides", [1, 2])
def test_resnet_block_merges_projection_shortcut_with_first_main_conv(strides):
    graph = build_graph(lambda: resnet_block(strides))
    ctx = context(["x"], ["out"])
    found = RULE.matches(graph, ctx)
    assert [m.nodes for m in found] == [("shortcut", "main_a")] and found[0].detail["with_bias"]
    merged = RULE.apply(graph, found[0], ctx)
    assert op_counts(merged)["Conv2D"] == 3 and op_counts(merged)["BiasAdd"] == 3
    assert_same_outputs(graph, merged, block_feeds((2, 8, 8, 8)), ["out"], atol=ATOL)


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory):
    return frozen_keras_branches(tmp_path_factory.mktemp("keras_branches"))


def test_frozen_keras_convs_of_different_sizes_are_not_merged_directly(keras_model):
    graph, ctx, inputs = keras_model
    assert RULE.matches(graph, ctx) == []
    # Once the 1x1 filter is zero-padded to 3x3 (enlarge_conv_kernel), they merge.
    from tfopt.optimizer.search.rules.enlarge_conv_kernel import EnlargeConvKernel
    enlarge = EnlargeConvKernel()
    enlarged = enlarge.apply(graph, enlarge.matches(graph, ctx)[0], ctx)
    found = RULE.matches(enlarged, ctx)
    merged = RULE.apply(enlarged, found[0], ctx)
    assert op_counts(merged)["Conv2D"] == 1 and op_counts(merged)["SplitV"] == 1
    assert_same_outputs(graph, merged, inputs, list(ctx.output_names), atol=ATOL)
