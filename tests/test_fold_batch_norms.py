"""fold_batch_norms: a per-channel Mul (and the add after it) is baked into the conv weights.

Tolerances: hand-built graphs 1e-5 (folding reorders float32 products, ~1e-7 relative); the real
Keras model 1e-4, because there every layer's rounding change feeds the next layer's input.
"""

import numpy as np
from graph_testing import (
    assert_idempotent,
    assert_same_outputs,
    build_graph,
    context,
    op_counts,
    tf,
)

from tfopt.optimizer.graph.names import node_name_from_input
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((2, 6, 6, 3)).astype(np.float32)


def _const(shape, low=0.5, high=1.5):
    return tf.constant(RNG.uniform(low, high, shape).astype(np.float32))


def _fold(graph, inputs=("x",), outputs=("y",)):
    return make_transform("fold_batch_norms")(graph, context(inputs, outputs))


def _by_name(graph):
    return {n.name: n for n in graph.node}


def _conv_mul():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        conv = tf.nn.conv2d(x, _const([3, 3, 3, 4], -1, 1), 1, "SAME", name="conv")
        tf.identity(tf.multiply(conv, _const([4]), name="scaled"), name="y")
    return build_graph(body)


def _keras_bn(conv_op="conv", scale_shape=None):
    """What a frozen Keras Conv2D(use_bias) + BatchNormalization looks like: the bias and the
    batch norm's scale and shift are still computed from constants behind Identity nodes."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        if conv_op == "depthwise":
            conv = tf.nn.depthwise_conv2d(x, tf.identity(_const([3, 3, 3, 2], -1, 1)),
                                          [1, 1, 1, 1], "SAME", name="conv")
            channels = 6
        else:
            conv = tf.nn.conv2d(x, tf.identity(_const([3, 3, 3, 4], -1, 1)), 1, "SAME",
                                name="conv")
            channels = 4
        bias = tf.squeeze(tf.reshape(tf.identity(_const([channels], -1, 1)), [1, channels]))
        biased = tf.nn.bias_add(conv, bias, name="bias")
        gamma, beta = tf.identity(_const([channels])), tf.identity(_const([channels], -1, 1))
        mean, var = tf.identity(_const([channels], -1, 1)), tf.identity(_const([channels]))
        scale = tf.math.rsqrt(var + 1e-3) * gamma
        shift = beta - mean * scale
        if scale_shape is not None:
            scale = tf.reshape(scale, scale_shape)
        scaled = tf.multiply(biased, scale, name="bn/mul")
        tf.nn.relu(tf.add(scaled, shift, name="bn/add"), name="y")
    return build_graph(body)


def test_fold_batch_norms_bakes_a_conv_times_constant_into_the_weights():
    graph = _conv_mul()
    folded = _fold(graph)

    assert op_counts(folded)["Mul"] == 0
    nodes = _by_name(folded)
    # GTT's semantics: the conv takes the Mul's name, so the Mul's readers need no rewiring.
    assert nodes["scaled"].op == "Conv2D" and "conv" not in nodes
    # The weights were read by this conv only: rewritten in place, not duplicated.
    assert op_counts(folded)["Const"] == op_counts(graph)["Const"] - 1
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_batch_norms_folds_the_keras_bias_scale_shift_chain_into_one_bias_add():
    graph = _keras_bn()
    folded = _fold(graph)

    counts = op_counts(folded)
    assert counts["Mul"] == 0 and counts["AddV2"] == 0 and counts["Rsqrt"] == 0
    assert counts["BiasAdd"] == 1 and counts["Conv2D"] == 1
    nodes = _by_name(folded)
    assert nodes["bn/add"].op == "BiasAdd"
    assert node_name_from_input(nodes["bn/add"].input[0]) == "conv"
    assert "bias" not in nodes and "bn/mul" not in nodes
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_batch_norms_reshapes_the_scale_for_a_depthwise_multiplier():
    graph = _keras_bn("depthwise")
    folded = _fold(graph)

    assert op_counts(folded)["Mul"] == 0 and op_counts(folded)["AddV2"] == 0
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_batch_norms_accepts_a_scale_shaped_1_1_1_c():
    graph = _keras_bn(scale_shape=(1, 1, 1, 4))
    folded = _fold(graph)

    assert op_counts(folded)["Mul"] == 0
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_batch_norms_turns_mul_then_add_without_bias_into_a_bias_add_named_as_the_add():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        conv = tf.nn.conv2d(x, _const([3, 3, 3, 4], -1, 1), 1, "VALID", name="conv")
        tf.identity(tf.add(_const([4], -1, 1), conv * _const([4]), name="shifted"), name="y")
    graph = build_graph(body)
    folded = _fold(graph)

    nodes = _by_name(folded)
    assert op_counts(folded)["Mul"] == 0 and op_counts(folded)["AddV2"] == 0
    assert nodes["shifted"].op == "BiasAdd" and nodes["conv"].op == "Conv2D"
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_batch_norms_folds_into_matmul_columns_also_with_transposed_weights():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 5], name="x")
        plain = tf.matmul(x, _const([5, 3], -1, 1), name="plain")
        transposed = tf.matmul(x, _const([3, 5], -1, 1), transpose_b=True, name="transposed")
        tf.identity(plain * _const([3]) + _const([1, 3]), name="y")
        tf.identity(transposed * _const([1, 3]), name="z")
    graph = build_graph(body)
    folded = _fold(graph, outputs=("y", "z"))

    assert op_counts(folded)["Mul"] == 0 and op_counts(folded)["AddV2"] == 0
    features = RNG.standard_normal((4, 5)).astype(np.float32)
    assert_same_outputs(graph, folded, {"x": features}, ["y", "z"], atol=1e-5)


def test_fold_batch_norms_leaves_weights_shared_with_another_conv_unchanged():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        weights = _const([1, 1, 3, 4], -1, 1)
        tf.identity(tf.nn.conv2d(x, weights, 1, "SAME") * _const([4]), name="y")
        tf.identity(tf.nn.conv2d(x, weights, 1, "SAME"), name="z")
    graph = build_graph(body)
    folded = _fold(graph, outputs=("y", "z"))

    assert op_counts(folded)["Mul"] == 0
    assert any(n.name.endswith("/folded_weights") for n in folded.node)
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y", "z"], atol=1e-5)


def test_fold_batch_norms_leaves_a_conv_whose_output_is_also_read_elsewhere():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        conv = tf.nn.conv2d(x, _const([3, 3, 3, 4], -1, 1), 1, "SAME", name="conv")
        tf.identity(conv * _const([4]), name="y")
        tf.identity(conv, name="raw")
    graph = build_graph(body)
    folded = _fold(graph, outputs=("y", "raw"))
    assert folded.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_fold_batch_norms_leaves_a_multiply_that_is_not_per_channel():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        y_scale = tf.compat.v1.placeholder(tf.float32, [4], name="runtime_scale")
        conv = tf.nn.conv2d(x, _const([3, 3, 3, 4], -1, 1), 1, "SAME")
        tf.identity(conv * _const([1, 6, 1, 1]), name="y")  # varies along H, not channels
        conv2 = tf.nn.conv2d(x, _const([3, 3, 3, 4], -1, 1), 1, "SAME")
        tf.identity(conv2 * y_scale, name="z")  # not a constant
    graph = build_graph(body)
    folded = _fold(graph, inputs=("x", "runtime_scale"), outputs=("y", "z"))
    assert op_counts(folded)["Mul"] == 2
    assert folded.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_fold_batch_norms_keeps_a_shift_that_is_not_per_channel_as_its_own_add():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        conv = tf.nn.conv2d(x, _const([3, 3, 3, 4], -1, 1), 1, "SAME", name="conv")
        tf.identity(tf.add(tf.multiply(conv, _const([4]), name="scaled"),
                           _const([6, 6, 1]), name="shifted"), name="y")
    graph = build_graph(body)
    folded = _fold(graph)

    nodes = _by_name(folded)
    assert op_counts(folded)["Mul"] == 0
    assert nodes["shifted"].op == "AddV2" and nodes["scaled"].op == "Conv2D"
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_batch_norms_twice_changes_nothing():
    assert_idempotent(make_transform("fold_batch_norms"), _keras_bn(), context(["x"], ["y"]))
    assert_idempotent(make_transform("fold_batch_norms"), _conv_mul(), context(["x"], ["y"]))


def test_fold_batch_norms_leaves_no_batch_norm_arithmetic_after_convs_of_a_keras_model(
        model_dir):
    model = freeze(model_dir("keras_cnn"))
    folded, _ = run_transforms(model, [make_transform("fold_batch_norms")])

    nodes = _by_name(folded.graph_def)
    convs = {n.name for n in folded.graph_def.node
             if n.op in ("Conv2D", "DepthwiseConv2dNative")}
    assert len(convs) == 3

    def reads_a_conv(node):
        sources = [nodes[node_name_from_input(i)] for i in node.input if not i.startswith("^")]
        return any(s.name in convs or (s.op == "BiasAdd" and
                                       node_name_from_input(s.input[0]) in convs)
                   for s in sources)

    residue = [n.name for n in folded.graph_def.node
               if n.op in ("Mul", "Add", "AddV2") and reads_a_conv(n)]
    assert residue == []
    assert op_counts(model.graph_def)["Mul"] > 0 and op_counts(folded.graph_def)["Mul"] == 0
    report = compare(model, folded, batches=2, batch_size=4)
    assert report.within(atol=1e-4), report.summary()
