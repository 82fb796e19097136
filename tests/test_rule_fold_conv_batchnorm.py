"""fold_conv_batchnorm: one conv's batch norm (arithmetic or FusedBatchNorm) folds per match.

Tolerances: 1e-5 on hand-built graphs (folding reorders float32 products, ~1e-7 relative); 1e-4
on the frozen Keras CNN, where each fold's rounding change feeds the next layer's input and three
folds compound (the same bound the fold_batch_norms transform's real-model test uses).
"""

import numpy as np
from graph_testing import assert_same_outputs, build_graph, context, op_counts, run_graph, tf

from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.search.rules import rule_class

RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((2, 6, 6, 3)).astype(np.float32)
RULE = rule_class("fold_conv_batchnorm")()
CTX = context(["x"], ["y"])


def _const(shape, low=0.5, high=1.5):
    return tf.constant(RNG.uniform(low, high, shape).astype(np.float32))


def _two_keras_convs(second_scale_shape=(4,)):
    """Two Keras-style conv -> BiasAdd -> Mul -> AddV2 chains, the way a frozen
    Conv2D(use_bias) + BatchNormalization looks once lowered to arithmetic."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        h = x
        for i, shape in enumerate([(4,), second_scale_shape]):
            conv = tf.nn.conv2d(h, _const([3, 3, h.shape[-1], 4], -1, 1), 1, "SAME",
                                name=f"conv{i}")
            biased = tf.nn.bias_add(conv, _const([4], -1, 1), name=f"bias{i}")
            scaled = tf.multiply(biased, _const(shape), name=f"bn{i}/mul")
            h = tf.nn.relu(tf.add(scaled, _const([4], -1, 1), name=f"bn{i}/add"))
        tf.identity(h, name="y")
    return build_graph(body)


def _conv_fused_batch_norm(is_training=False):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [2, 6, 6, 3], name="x")
        conv = tf.nn.conv2d(x, _const([3, 3, 3, 4], -1, 1), 1, "SAME", name="conv")
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(
            conv, _const([4]), _const([4], -1, 1), _const([4], -1, 1), _const([4]),
            epsilon=1e-3, is_training=is_training, name="bn")
        tf.nn.relu(y, name="y")
    return build_graph(body)


def test_fold_conv_batchnorm_finds_one_match_per_conv_in_deterministic_order():
    graph = _two_keras_convs()
    found = RULE.matches(graph, CTX)
    assert [m.nodes for m in found] == [("conv0", "bias0", "bn0/mul", "bn0/add"),
                                        ("conv1", "bias1", "bn1/mul", "bn1/add")]
    assert found == RULE.matches(graph, CTX)


def test_fold_conv_batchnorm_applies_one_fold_per_match_and_keeps_the_outputs():
    graph = _two_keras_convs()
    first = RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)

    # Only the first chain folds: its Mul goes, its BiasAdd takes the add's name.
    nodes = {n.name: n for n in first.node}
    assert "bn0/mul" not in nodes and nodes["bn0/add"].op == "BiasAdd"
    assert nodes["bn1/mul"].op == "Mul"
    assert op_counts(graph)["Mul"] - op_counts(first)["Mul"] == 1
    assert op_counts(graph)["BiasAdd"] == op_counts(first)["BiasAdd"]
    assert_same_outputs(graph, first, {"x": IMAGE}, ["y"], atol=1e-5)

    [second] = RULE.matches(first, CTX)
    both = RULE.apply(first, second, CTX)
    assert op_counts(both)["Mul"] == 0 and RULE.matches(both, CTX) == []
    assert_same_outputs(graph, both, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_conv_batchnorm_folds_an_inference_fused_batch_norm():
    graph = _conv_fused_batch_norm()
    [match] = RULE.matches(graph, CTX)
    assert match.nodes == ("conv", "bn")
    folded = RULE.apply(graph, match, CTX)
    assert op_counts(folded)["FusedBatchNormV3"] + op_counts(folded)["FusedBatchNorm"] == 0
    assert {n.name: n.op for n in folded.node}["bn"] == "BiasAdd"
    assert_same_outputs(graph, folded, {"x": IMAGE[:2]}, ["y"], atol=1e-5)


def test_fold_conv_batchnorm_folds_a_matmul_times_scale_plus_shift():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 5], name="x")
        dense = tf.matmul(x, _const([5, 4], -1, 1), name="dense")
        scaled = tf.multiply(dense, _const([4]), name="bn/mul")
        tf.nn.relu(tf.add(scaled, _const([4], -1, 1), name="bn/add"), name="y")
    graph = build_graph(body)
    [match] = RULE.matches(graph, CTX)
    assert match.nodes == ("dense", "bn/mul", "bn/add")
    folded = RULE.apply(graph, match, CTX)
    assert op_counts(folded)["Mul"] == 0 and op_counts(folded)["MatMul"] == 1
    rows = RNG.standard_normal((3, 5)).astype(np.float32)
    assert_same_outputs(graph, folded, {"x": rows}, ["y"], atol=1e-5)


def test_fold_conv_batchnorm_leaves_near_misses_unmatched():
    # A scale that is not per output channel (it varies along the width) cannot go into the
    # weights; a training-mode batch norm normalizes with the batch's own statistics.
    assert [m.nodes[0] for m in RULE.matches(_two_keras_convs((6, 1)), CTX)] == ["conv0"]
    assert RULE.matches(_conv_fused_batch_norm(is_training=True), CTX) == []
    # The Mul must keep its place when it is a protected node.
    assert [m.nodes[0] for m in RULE.matches(_two_keras_convs(),
                                             context(["x"], ["y"], ["bn0/mul"]))] == ["conv1"]


def test_fold_conv_batchnorm_does_not_modify_its_input():
    graph = _two_keras_convs()
    before = graph.SerializeToString(deterministic=True)
    for match in RULE.matches(graph, CTX):
        RULE.apply(graph, match, CTX)
    assert graph.SerializeToString(deterministic=True) == before


def test_fold_conv_batchnorm_one_match_at_a_time_keeps_a_keras_cnn_equivalent(model_dir):
    model = freeze(model_dir("keras_cnn"))
    ctx = context(model.input_node_names, model.output_node_names)
    [feed] = [s.tensor_name for s in model.signature.inputs]
    [fetch] = [s.tensor_name for s in model.signature.outputs]
    images = RNG.standard_normal((4, *model.signature.inputs[0].shape[1:])).astype(np.float32)
    expected = run_graph(model.graph_def, {feed: images}, [fetch])[0]

    graph, applied = model.graph_def, 0
    while found := RULE.matches(graph, ctx):
        graph = RULE.apply(graph, found[0], ctx)
        applied += 1
        actual = run_graph(graph, {feed: images}, [fetch])[0]
        np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=0,
                                   err_msg=f"after {applied} folds")
    # keras_cnn has a Conv2D, a DepthwiseConv2D and a second Conv2D, each with a batch norm.
    assert applied == 3
    assert op_counts(model.graph_def)["Mul"] > 0 and op_counts(graph)["Mul"] == 0
