"""fold_old_batch_norms: monolithic inference batch-norm ops fold into the conv before them.

Tolerances: 1e-5 on hand-built graphs (folding reorders float32 products; observed ~1e-6);
1e-4 on the frozen TF1 SavedModel, whose two stacked folds compound rounding.
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
IMAGE = RNG.standard_normal((2, 8, 8, 3)).astype(np.float32)
BATCH_NORM_OPS = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3",
                  "BatchNormWithGlobalNormalization")


def _values(shape, low=0.5, high=1.5):
    return RNG.uniform(low, high, shape).astype(np.float32)


def _bn_params(channels):
    """gamma, beta, mean, variance: non-trivial so that a wrong fold shows in the outputs."""
    return (_values([channels]), _values([channels], -1, 1), _values([channels], -1, 1),
            _values([channels]))


def _fold(graph, outputs=("y",)):
    return make_transform("fold_old_batch_norms")(graph, context(["x"], outputs))


def _by_name(graph):
    return {n.name: n for n in graph.node}


def _conv_fused_batch_norm(is_training=False, depthwise=False, with_bias=False, op=None):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [2, 8, 8, 3], name="x")
        if depthwise:
            conv = tf.nn.depthwise_conv2d(x, tf.identity(_values([3, 3, 3, 2], -1, 1)),
                                          [1, 1, 1, 1], "SAME", name="conv")
        else:
            conv = tf.nn.conv2d(x, tf.identity(_values([3, 3, 3, 6], -1, 1)), 1, "SAME",
                                name="conv")
        if with_bias:
            conv = tf.nn.bias_add(conv, _values([6], -1, 1), name="bias")
        gamma, beta, mean, variance = (tf.identity(v) for v in _bn_params(6))
        if op is None:
            normalized, _, _ = tf.compat.v1.nn.fused_batch_norm(
                conv, gamma, beta, mean, variance, epsilon=1e-3, is_training=is_training,
                name="bn")
        else:
            normalized = getattr(tf.raw_ops, op)(
                x=conv, scale=gamma, offset=beta, mean=mean, variance=variance, epsilon=1e-3,
                is_training=is_training, name="bn")[0]
        tf.nn.relu(normalized, name="y")
    return build_graph(body)


def _conv_global_batch_norm(scale_after_normalization):
    """A TF1-era graph: BatchNormWithGlobalNormalization was removed at GraphDef version 9, so it
    is written as a NodeDef into a GraphDef that declares producer version 8."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        tf.nn.conv2d(x, _values([3, 3, 3, 4], -1, 1), 1, "SAME", name="conv")
        gamma, beta, mean, variance = _bn_params(4)
        for name, value in (("m", mean), ("v", variance), ("beta", beta), ("gamma", gamma)):
            tf.constant(value, name=name)
    graph = build_graph(body)
    graph.versions.producer = 8
    bn = graph.node.add(name="bn", op="BatchNormWithGlobalNormalization",
                        input=["conv", "m", "v", "beta", "gamma"])
    bn.attr["T"].type = tf.float32.as_datatype_enum
    bn.attr["variance_epsilon"].f = 1e-3
    bn.attr["scale_after_normalization"].b = scale_after_normalization
    graph.node.add(name="y", op="Relu", input=["bn"]).attr["T"].type = tf.float32.as_datatype_enum
    return graph


def test_fold_old_batch_norms_turns_an_inference_fused_batch_norm_into_a_bias_add():
    graph = _conv_fused_batch_norm()
    assert op_counts(graph)["FusedBatchNormV3"] == 1
    folded = _fold(graph)

    nodes = _by_name(folded)
    assert not any(op_counts(folded)[op] for op in BATCH_NORM_OPS)
    assert nodes["bn"].op == "BiasAdd" and node_name_from_input(nodes["bn"].input[0]) == "conv"
    assert "conv_bn_offset" in nodes
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_old_batch_norms_folds_batch_norm_with_global_normalization():
    for scale_after_normalization in (True, False):
        graph = _conv_global_batch_norm(scale_after_normalization)
        folded = _fold(graph)

        assert op_counts(folded)["BatchNormWithGlobalNormalization"] == 0
        assert _by_name(folded)["bn"].op == "BiasAdd"
        assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_old_batch_norms_folds_v1_and_v2_fused_batch_norm_after_a_depthwise_conv():
    for op in ("FusedBatchNorm", "FusedBatchNormV2"):
        graph = _conv_fused_batch_norm(depthwise=True, op=op)
        folded = _fold(graph)

        assert op_counts(folded)[op] == 0 and op_counts(folded)["DepthwiseConv2dNative"] == 1
        assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_old_batch_norms_merges_a_bias_add_before_the_batch_norm():
    graph = _conv_fused_batch_norm(with_bias=True)
    folded = _fold(graph)

    assert op_counts(folded)["FusedBatchNormV3"] == 0 and op_counts(folded)["BiasAdd"] == 1
    assert "bias" not in _by_name(folded)
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def _atrous_conv_batch_norm(bias=None):
    """SpaceToBatchND -> Conv2D -> BatchToSpaceND, the TF1 atrous convolution, then a batch
    norm; ``bias`` puts a BiasAdd "before" or "after" the BatchToSpaceND."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [2, 8, 8, 3], name="x")
        spread = tf.space_to_batch_nd(x, [2, 2], [[2, 2], [2, 2]])
        h = tf.nn.conv2d(spread, _values([3, 3, 3, 4], -1, 1), 1, "VALID", name="conv")
        if bias == "before":
            h = tf.nn.bias_add(h, _values([4], -1, 1))
        h = tf.compat.v1.batch_to_space_nd(h, [2, 2], [[0, 0], [0, 0]], name="b2s")
        if bias == "after":
            h = tf.nn.bias_add(h, _values([4], -1, 1))
        gamma, beta, mean, variance = _bn_params(4)
        normalized, _, _ = tf.compat.v1.nn.fused_batch_norm(
            h, gamma, beta, mean, variance, epsilon=1e-3, is_training=False, name="bn")
        tf.nn.relu(normalized, name="y")
    return build_graph(body)


def test_fold_old_batch_norms_folds_through_the_batch_to_space_of_an_atrous_conv():
    graph = _atrous_conv_batch_norm()
    folded = _fold(graph)

    nodes = _by_name(folded)
    assert op_counts(folded)["FusedBatchNormV3"] == 0 and "b2s" not in nodes
    # GTT's layout: the bias sits between the conv and the BatchToSpaceND, which takes the
    # batch norm's name.
    assert nodes["bn"].op == "BatchToSpaceND"
    assert nodes[node_name_from_input(nodes["bn"].input[0])].op == "BiasAdd"
    assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_old_batch_norms_folds_an_atrous_conv_bias_on_either_side_of_batch_to_space():
    for bias in ("before", "after"):
        graph = _atrous_conv_batch_norm(bias)
        folded = _fold(graph)

        counts = op_counts(folded)
        assert counts["FusedBatchNormV3"] == 0 and counts["BiasAdd"] == 1, bias
        assert_same_outputs(graph, folded, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fold_old_batch_norms_leaves_a_training_mode_batch_norm_alone():
    graph = _conv_fused_batch_norm(is_training=True)
    folded = _fold(graph)
    assert folded.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_fold_old_batch_norms_leaves_a_batch_norm_whose_statistics_outputs_are_read():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [2, 8, 8, 3], name="x")
        conv = tf.nn.conv2d(x, _values([3, 3, 3, 4], -1, 1), 1, "SAME", name="conv")
        gamma, beta, mean, variance = _bn_params(4)
        normalized, batch_mean, _ = tf.compat.v1.nn.fused_batch_norm(
            conv, gamma, beta, mean, variance, is_training=False, name="bn")
        tf.identity(normalized, name="y")
        tf.identity(batch_mean, name="stats")
    graph = build_graph(body)
    folded = _fold(graph, outputs=("y", "stats"))
    assert op_counts(folded)["FusedBatchNormV3"] == 1
    assert folded.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_fold_old_batch_norms_twice_changes_nothing():
    assert_idempotent(make_transform("fold_old_batch_norms"), _conv_fused_batch_norm(),
                      context(["x"], ["y"]))
    assert_idempotent(make_transform("fold_old_batch_norms"), _conv_global_batch_norm(True),
                      context(["x"], ["y"]))


def test_fold_old_batch_norms_folds_a_frozen_tf1_saved_model(tmp_path):
    """Variables frozen into constants reach the batch norm through Identity nodes."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        h = x
        for layer, (channels_in, channels) in enumerate(((3, 4), (4, 6))):
            with tf.compat.v1.variable_scope(f"layer{layer}"):
                weights = tf.compat.v1.get_variable(
                    "weights", initializer=_values([3, 3, channels_in, channels], -1, 1))
                params = [tf.compat.v1.get_variable(name, initializer=value) for name, value
                          in zip(("gamma", "beta", "moving_mean", "moving_variance"),
                                 _bn_params(channels))]
                h = tf.nn.conv2d(h, weights, 1, "SAME")
                h = tf.nn.relu(tf.compat.v1.nn.fused_batch_norm(h, *params, epsilon=1e-3,
                                                                is_training=False)[0])
        y = tf.identity(h, name="y")
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.saved_model.simple_save(session, str(tmp_path / "model"),
                                                 {"x": x}, {"y": y})
    model = freeze(tmp_path / "model")
    assert op_counts(model.graph_def)["FusedBatchNormV3"] == 2

    folded, _ = run_transforms(model, [make_transform("fold_old_batch_norms")])

    assert op_counts(folded.graph_def)["FusedBatchNormV3"] == 0
    report = compare(model, folded, batches=2, batch_size=4)
    assert report.within(atol=1e-4), report.summary()
