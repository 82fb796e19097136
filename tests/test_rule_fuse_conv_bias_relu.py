"""fuse_conv_bias_relu: Conv2D + BiasAdd(const) + Relu/Relu6 -> one _FusedConv2D."""

import numpy as np
import pytest
from graph_testing import assert_same_outputs, build_graph, context, op_counts, tf
from parallel_blocks import (
    apply_all,
    block_feeds,
    frozen_keras_branches,
    inception_block,
    resnet_block,
)

from tfopt.optimizer.search.rules.fuse_conv_bias_relu import FuseConvBiasRelu
from tfopt.optimizer.transforms.grappler import Grappler

RULE = FuseConvBiasRelu()
CTX = context(["x"], ["out"])
# The fused kernel runs the same convolution, then adds the bias and clamps in its output loop;
# only float32 summation order may differ.
ATOL = 1e-5


def conv_bias_act(activation=tf.nn.relu, const_bias=True, extra_conv_reader=False,
                  extra_bias_reader=False, data_format_nchw_bias=False, dilations=1):
    def body():
        rng = np.random.default_rng(0)
        x = tf.compat.v1.placeholder(tf.float32, [2, 6, 6, 3], name="x")
        w = tf.constant(rng.normal(size=(3, 3, 3, 4)).astype(np.float32), name="w")
        bias_value = rng.normal(size=4).astype(np.float32)
        bias = tf.constant(bias_value, name="b") if const_bias else \
            tf.compat.v1.placeholder_with_default(bias_value, [4], name="b")
        conv = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME", dilations=[1, dilations, dilations, 1],
                            name="conv")
        if data_format_nchw_bias:
            y = tf.raw_ops.BiasAdd(value=conv, bias=tf.ones([6]), data_format="NCHW",
                                   name="bias")
        else:
            y = tf.nn.bias_add(conv, bias, name="bias")
        out = activation(y, name="out")
        if extra_conv_reader:
            tf.identity(conv, name="conv_reader")
        if extra_bias_reader:
            tf.identity(y, name="bias_reader")
        return out
    return build_graph(body)


def feeds():
    return block_feeds((2, 6, 6, 3))


def test_matches_conv_biasadd_relu_chain():
    assert [m.nodes for m in RULE.matches(conv_bias_act(), CTX)] == [("conv", "bias", "out")]


@pytest.mark.parametrize("activation,op", [(tf.nn.relu, "Relu"), (tf.nn.relu6, "Relu6")])
def test_apply_replaces_the_chain_by_one_fused_conv_named_like_the_activation(activation, op):
    graph = conv_bias_act(activation)
    fused = RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    assert op_counts(fused)["_FusedConv2D"] == 1
    assert not {"Conv2D", "BiasAdd", "Relu", "Relu6"} & set(op_counts(fused))
    node = {n.name: n for n in fused.node}["out"]
    assert node.op == "_FusedConv2D"
    assert list(node.attr["fused_ops"].list.s) == [b"BiasAdd", op.encode()]
    assert_same_outputs(graph, fused, feeds(), ["out"], atol=ATOL)


@pytest.mark.parametrize("device", ["", "/device:CPU:0"])
def test_fused_node_runs_in_a_session_with_or_without_a_cpu_device(device):
    graph = conv_bias_act()
    for node in graph.node:
        node.device = device
    fused = RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    assert {n.name: n for n in fused.node}["out"].device == device
    assert_same_outputs(graph, fused, feeds(), ["out"], atol=ATOL)


def test_fused_node_has_the_attrs_grapplers_remapper_emits():
    graph = conv_bias_act()
    ours = {n.name: n for n in RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX).node}["out"]
    remapped = Grappler(optimizers=["remapper"])(graph, CTX)
    theirs = [n for n in remapped.node if n.op == "_FusedConv2D"]
    assert len(theirs) == 1, "the remapper fused the chain (reference)"
    reference = {k: v for k, v in theirs[0].attr.items() if not k.startswith("_")}
    assert dict(ours.attr) == reference


@pytest.mark.parametrize("near_miss", [
    {"activation": tf.nn.sigmoid}, {"const_bias": False}, {"extra_conv_reader": True},
    {"extra_bias_reader": True}, {"data_format_nchw_bias": True}, {"dilations": 2}],
    ids=["not a relu", "non-const bias", "conv read elsewhere", "biasadd read elsewhere",
         "biasadd on another axis", "dilated conv"])
def test_near_misses_are_left_alone(near_miss):
    assert RULE.matches(conv_bias_act(**near_miss), CTX) == []


def test_a_conv_in_the_boundary_is_not_fused_away():
    assert RULE.matches(conv_bias_act(), context(["x"], ["out", "conv"])) == []


def test_apply_does_not_modify_its_input():
    graph = conv_bias_act()
    before = graph.SerializeToString(deterministic=True)
    RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    assert graph.SerializeToString(deterministic=True) == before


def test_inception_block_fuses_every_branch():
    graph = build_graph(inception_block)
    fused, applied = apply_all(RULE, graph, CTX)
    assert [m.nodes[0] for m in applied] == ["b1", "b2_reduce", "b2", "b3", "b4"]
    assert op_counts(fused)["_FusedConv2D"] == 5 and op_counts(fused)["Conv2D"] == 0
    assert_same_outputs(graph, fused, block_feeds(), ["out"], atol=ATOL)


def test_resnet_block_fuses_only_convs_followed_by_a_relu():
    graph = build_graph(resnet_block)
    fused, applied = apply_all(RULE, graph, CTX)
    # The shortcut and the last main conv feed the Add without a Relu of their own.
    assert [m.nodes[0] for m in applied] == ["main_a", "main_b"]
    assert op_counts(fused)["Conv2D"] == 2
    assert_same_outputs(graph, fused, block_feeds((2, 8, 8, 8)), ["out"], atol=ATOL)


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory):
    return frozen_keras_branches(tmp_path_factory.mktemp("keras_branches"))


def test_frozen_keras_convs_with_relu_are_fused_and_outputs_unchanged(keras_model):
    graph, ctx, inputs = keras_model
    fused, applied = apply_all(RULE, graph, ctx)
    # Keras 3 computes the bias as Squeeze(Reshape(b)): a constant-only subgraph, still fused.
    assert len(applied) == 2 and op_counts(fused)["Conv2D"] == 0
    assert op_counts(fused)["_FusedConv2D"] == 2
    assert_same_outputs(graph, fused, inputs, list(ctx.output_names), atol=ATOL)
