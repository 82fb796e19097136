"""enlarge_conv_kernel: zero-pad a conv's filter to a sibling's larger kernel, outputs unchanged."""

import itertools

import numpy as np
import pytest
from graph_testing import assert_same_outputs, build_graph, context, op_counts, run_graph, tf
from parallel_blocks import (
    apply_all,
    block_feeds,
    convs_in_while_loop,
    frozen_keras_branches,
    inception_block,
    resnet_block,
)

from tfopt.optimizer.search.rules.enlarge_conv_kernel import EnlargeConvKernel
from tfopt.optimizer.search.rules.merge_parallel_convs import MergeParallelConvs

RULE = EnlargeConvKernel()
CTX = context(["x"], ["small", "large"])
# The enlarged conv adds exact zeros; only the summation order of float32 products may change.
ATOL = 1e-5


def siblings(small=1, large=3, size=7, strides=(1, 1), strides_large=None, padding="SAME",
             padding_large="SAME", dilations_large=1, spatial_known=True):
    def body():
        rng = np.random.default_rng(0)
        shape = [2, size, size, 3] if spatial_known else [None, None, None, 3]
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        ws = tf.constant(rng.normal(size=(small, small, 3, 4)).astype(np.float32), name="ws")
        wl = tf.constant(rng.normal(size=(large, large, 3, 5)).astype(np.float32), name="wl")
        s = [1, *strides, 1]
        tf.nn.conv2d(x, ws, s, padding, name="small")
        tf.nn.conv2d(x, wl, [1, *(strides_large or strides), 1], padding_large,
                     dilations=[1, dilations_large, dilations_large, 1], name="large")
    return build_graph(body)


def feeds(size=7):
    return block_feeds((2, size, size, 3))


def filter_shape(graph_def, conv):
    nodes = {n.name: n for n in graph_def.node}
    const = nodes[nodes[conv].input[1]]
    return tf.make_ndarray(const.attr["value"].tensor).shape


def test_matches_a_1x1_conv_beside_a_3x3_sibling():
    found = RULE.matches(siblings(), CTX)
    assert [m.nodes for m in found] == [("small", "large")]
    assert found[0].detail == {"kernel": (3, 3), "offset": (1, 1)}


def test_apply_zero_pads_the_filter_centered_and_keeps_the_name():
    graph = siblings()
    enlarged = RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    assert filter_shape(enlarged, "small") == (3, 3, 3, 4)
    assert op_counts(enlarged) == op_counts(graph)
    nodes = {n.name: n for n in enlarged.node}
    weights = tf.make_ndarray(nodes[nodes["small"].input[1]].attr["value"].tensor)
    assert np.count_nonzero(weights[[0, 2]]) == 0 and np.count_nonzero(weights[:, [0, 2]]) == 0
    assert_same_outputs(graph, enlarged, feeds(), ["small", "large"], atol=ATOL)


# Every kernel pair, stride and (odd and even) input size: whenever the rule matches, the
# enlarged conv must give the same outputs; with stride 1 it must always match.
CASES = [(k, K, s, n) for k, K in itertools.combinations([1, 2, 3, 5], 2)
         for s in (1, 2, 3) for n in (6, 7)]


@pytest.mark.parametrize("small,large,stride,size", CASES)
def test_same_padding_offsets_are_exact_for_every_stride_and_size(small, large, stride, size):
    graph = siblings(small, large, size, strides=(stride, stride))
    found = RULE.matches(graph, CTX)
    if stride == 1:
        assert len(found) == 1
    for match in found:
        enlarged = RULE.apply(graph, match, CTX)
        assert filter_shape(enlarged, "small")[:2] == (large, large)
        assert_same_outputs(graph, enlarged, feeds(size), ["small"], atol=ATOL)


def test_stride_2_matches_only_where_the_padding_offsets_line_up():
    # n=8, s=2: a 1x1 kernel gets no padding, a 3x3 one gets 0 before and 1 after, so the
    # 1x1 weights belong at offset 0 (not the centre); n=7: 3x3 pads 1 before -> offset 1.
    assert RULE.matches(siblings(1, 3, 8, strides=(2, 2)), CTX)[0].detail["offset"] == (0, 0)
    assert RULE.matches(siblings(1, 3, 7, strides=(2, 2)), CTX)[0].detail["offset"] == (1, 1)


def test_a_misplaced_kernel_would_change_the_outputs():
    """The offset check is not vacuous: centring the 1x1 kernel for n=8, stride 2 is wrong."""
    graph = siblings(1, 3, 8, strides=(2, 2))
    match = RULE.matches(graph, CTX)[0]
    centred = type(match)(match.rule, match.nodes, {"kernel": (3, 3), "offset": (1, 1)})
    wrong = RULE.apply(graph, centred, CTX)
    before, after = (run_graph(g, feeds(8), ["small"])[0] for g in (graph, wrong))
    assert np.abs(before - after).max() > 1e-3


@pytest.mark.parametrize("near_miss", [
    {"strides_large": (2, 2)}, {"padding": "VALID", "padding_large": "VALID"},
    {"padding_large": "VALID"}, {"dilations_large": 2}, {"small": 3, "large": 3},
    {"strides": (2, 2), "spatial_known": False}],
    ids=["sibling has other strides", "VALID padding", "sibling VALID", "sibling dilated",
         "same kernel size", "stride 2 with unknown spatial size"])
def test_near_misses_are_left_alone(near_miss):
    assert RULE.matches(siblings(**near_miss), CTX) == []


def test_a_conv_without_a_larger_sibling_is_not_enlarged():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [1, 5, 5, 3], name="x")
        tf.nn.conv2d(x, tf.ones([1, 1, 3, 2]), [1, 1, 1, 1], "SAME", name="small")
        tf.nn.conv2d(tf.nn.relu(x), tf.ones([3, 3, 3, 2]), [1, 1, 1, 1], "SAME", name="large")
    assert RULE.matches(build_graph(body), CTX) == []


def test_convs_inside_a_while_loop_are_left_alone():
    loop = convs_in_while_loop(kernel_a=1, kernel_b=3)
    assert RULE.matches(loop.graph_def, context(loop.input_nodes, loop.output_nodes)) == []


def test_apply_does_not_modify_its_input():
    graph = siblings()
    before = graph.SerializeToString(deterministic=True)
    RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    assert graph.SerializeToString(deterministic=True) == before


def test_enlarge_then_merge_turns_a_1x1_and_a_3x3_conv_into_one_conv():
    graph = siblings()
    assert MergeParallelConvs().matches(graph, CTX) == [], "different kernels: no merge yet"
    enlarged = RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    merge = MergeParallelConvs()
    merged = merge.apply(enlarged, merge.matches(enlarged, CTX)[0], CTX)
    assert op_counts(merged)["Conv2D"] == 1 and op_counts(merged)["SplitV"] == 1
    assert_same_outputs(graph, merged, feeds(), ["small", "large"], atol=ATOL)


def test_inception_block_enlarges_both_1x1_convs_then_merges_all_three():
    graph = build_graph(inception_block)
    ctx = context(["x"], ["out"])
    found = RULE.matches(graph, ctx)
    assert [m.nodes for m in found] == [("b1", "b3"), ("b2_reduce", "b3")]
    enlarged, applied = apply_all(RULE, graph, ctx)
    assert len(applied) == 2
    merge = MergeParallelConvs()
    assert [m.nodes for m in merge.matches(enlarged, ctx)] == [("b1", "b2_reduce", "b3")]
    merged = merge.apply(enlarged, merge.matches(enlarged, ctx)[0], ctx)
    assert op_counts(merged)["Conv2D"] == op_counts(graph)["Conv2D"] - 2
    assert_same_outputs(graph, enlarged, block_feeds(), ["out"], atol=ATOL)
    assert_same_outputs(graph, merged, block_feeds(), ["out"], atol=ATOL)


def test_resnet_block_has_no_larger_sibling_on_the_block_input():
    # The projection shortcut and the first main conv are both 1x1: nothing to enlarge to.
    assert RULE.matches(build_graph(resnet_block), context(["x"], ["out"])) == []


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory):
    return frozen_keras_branches(tmp_path_factory.mktemp("keras_branches"))


def test_frozen_keras_1x1_and_3x3_convs_become_one_conv(keras_model):
    graph, ctx, inputs = keras_model
    found = RULE.matches(graph, ctx)
    assert len(found) == 1 and found[0].detail["kernel"] == (3, 3)
    enlarged = RULE.apply(graph, found[0], ctx)
    merge = MergeParallelConvs()
    matches = merge.matches(enlarged, ctx)
    assert len(matches) == 1 and matches[0].detail["with_bias"]
    merged = merge.apply(enlarged, matches[0], ctx)
    assert op_counts(merged)["Conv2D"] == 1
    assert_same_outputs(graph, merged, inputs, list(ctx.output_names), atol=ATOL)
