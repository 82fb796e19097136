"""fuse_pad_and_conv: a MirrorPad before a Conv2D becomes GTT's FusedPadConv2D, and a zero Pad
before a VALID convolution becomes the conv's EXPLICIT padding.

Tolerance 1e-5 throughout: the same products are summed, but the EXPLICIT-padding kernel and
FusedPadConv2D's im2col + GEMM may order the accumulation differently from MirrorPad/Pad + the
oneDNN Conv2D (observed differences ~1e-6; outputs here are of order 1-10).
"""

import keras
import numpy as np
import pytest
from graph_testing import (
    assert_idempotent,
    assert_same_outputs,
    build_graph,
    context,
    op_counts,
    tf,
)

from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.optimize.native_gtt import transform_graph
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((2, 7, 7, 3)).astype(np.float32)
HW_PADDINGS = [[0, 0], [1, 2], [3, 0], [0, 0]]


def _weights(shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _fuse(graph, outputs=("y",)):
    return make_transform("fuse_pad_and_conv")(graph, context(["x"], outputs))


def _by_name(graph):
    return {n.name: n for n in graph.node}


def _pad_conv(pad=lambda x: tf.pad(x, HW_PADDINGS, name="pad"), padding="VALID", strides=1):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 7, 7, 3], name="x")
        padded = pad(x)
        filters = _weights([3, 3, padded.shape[-1], 4])
        tf.nn.relu(tf.nn.conv2d(padded, filters, strides, padding, name="conv"), name="y")
    return build_graph(body)


def test_fuse_pad_and_conv_moves_the_padding_into_the_conv():
    graph = _pad_conv(strides=2)
    fused = _fuse(graph)

    conv = _by_name(fused)["conv"]
    assert op_counts(fused)["Pad"] == 0
    assert conv.attr["padding"].s == b"EXPLICIT"
    assert list(conv.attr["explicit_paddings"].list.i) == [0, 0, 1, 2, 3, 0, 0, 0]
    assert conv.input[0] == "x"
    assert_same_outputs(graph, fused, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fuse_pad_and_conv_fuses_a_zero_pad_v2():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 7, 7, 3], name="x")
        padded = tf.raw_ops.PadV2(input=x, paddings=HW_PADDINGS, constant_values=0.0)
        tf.nn.conv2d(padded, _weights([3, 3, 3, 2]), 2, "VALID", name="y")
    graph = build_graph(body)
    fused = _fuse(graph)

    assert op_counts(fused)["PadV2"] == 0
    assert _by_name(fused)["y"].attr["padding"].s == b"EXPLICIT"
    assert_same_outputs(graph, fused, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fuse_pad_and_conv_leaves_a_depthwise_conv_alone():
    """TF 2.21 + oneDNN aborts on an EXPLICIT-padded depthwise conv followed by a BiasAdd."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 7, 7, 3], name="x")
        depthwise = tf.nn.depthwise_conv2d(tf.pad(x, HW_PADDINGS), _weights([3, 3, 3, 2]),
                                           [1, 2, 2, 1], "VALID")
        tf.nn.bias_add(depthwise, _weights([6]), name="y")
    graph = build_graph(body)
    fused = _fuse(graph)
    assert fused.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_fuse_pad_and_conv_adds_to_padding_that_is_already_explicit():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 7, 7, 3], name="x")
        tf.nn.conv2d(tf.pad(x, HW_PADDINGS), _weights([3, 3, 3, 4]), 1,
                     [[0, 0], [1, 1], [0, 2], [0, 0]], name="y")
    graph = build_graph(body)
    fused = _fuse(graph)

    assert list(_by_name(fused)["y"].attr["explicit_paddings"].list.i) == [0, 0, 2, 3, 3, 2, 0, 0]
    assert_same_outputs(graph, fused, {"x": IMAGE}, ["y"], atol=1e-5)


def test_fuse_pad_and_conv_leaves_pads_the_conv_cannot_express():
    near_misses = {
        "channel padding": _pad_conv(lambda x: tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 1]])),
        "non-zero fill": _pad_conv(lambda x: tf.pad(x, HW_PADDINGS, constant_values=1.0)),
        "SAME conv": _pad_conv(padding="SAME"),
    }
    for why, graph in near_misses.items():
        fused = _fuse(graph)
        assert fused.SerializeToString(deterministic=True) == \
            graph.SerializeToString(deterministic=True), why


def test_fuse_pad_and_conv_leaves_a_pad_whose_output_is_read_elsewhere():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 7, 7, 3], name="x")
        padded = tf.pad(x, HW_PADDINGS)
        tf.nn.conv2d(padded, _weights([3, 3, 3, 4]), 1, "VALID", name="y")
        tf.identity(padded, name="padded")
    graph = build_graph(body)
    fused = _fuse(graph, outputs=("y", "padded"))
    assert op_counts(fused)["Pad"] == 1
    assert _by_name(fused)["y"].attr["padding"].s == b"VALID"


def test_fuse_pad_and_conv_twice_changes_nothing():
    assert_idempotent(make_transform("fuse_pad_and_conv"), _pad_conv(), context(["x"], ["y"]))


def test_fuse_pad_and_conv_fuses_a_keras_zero_padding_before_a_conv(tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((15, 15, 3), name="image")
    x = keras.layers.ZeroPadding2D(3)(inputs)
    x = keras.layers.Conv2D(8, 7, strides=2, activation="relu")(x)
    x = keras.layers.ZeroPadding2D(((0, 1), (0, 1)))(x)
    x = keras.layers.DepthwiseConv2D(3, strides=2)(x)
    outputs = keras.layers.GlobalAveragePooling2D()(x)
    keras.Model(inputs, outputs).export(str(tmp_path / "model"), verbose=False)
    model = freeze(tmp_path / "model")
    assert op_counts(model.graph_def)["Pad"] == 2

    fused, _ = run_transforms(model, [make_transform("fuse_pad_and_conv")])

    # The Conv2D's padding is fused; the depthwise conv's is kept (see the module docstring).
    assert op_counts(fused.graph_def)["Pad"] == 1
    stem = next(n for n in fused.graph_def.node if n.op == "Conv2D")
    assert stem.attr["padding"].s == b"EXPLICIT"
    report = compare(model, fused, batches=2, batch_size=4)
    assert report.within(atol=1e-5), report.summary()


# --- MirrorPad -> FusedPadConv2D (GTT's fuse_pad_and_conv) ---------------------------------

SINGLE_IMAGE = IMAGE[:1]


def _mirror_pad_conv(mode="REFLECT", padding="VALID", strides=2, shape=(1, 7, 7, 3),
                     paddings=HW_PADDINGS, dilations=1):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, list(shape), name="x")
        padded = tf.pad(x, paddings, mode=mode, name="pad")
        filters = _weights([3, 3, padded.shape[-1], 4])
        tf.nn.relu(tf.nn.conv2d(padded, filters, strides, padding, dilations=dilations,
                                name="conv"), name="y")
    return build_graph(body)


def test_fuse_pad_and_conv_turns_mirror_pad_and_conv_into_fused_pad_conv2d():
    graph = _mirror_pad_conv()
    fused = _fuse(graph)

    counts = op_counts(fused)
    assert (counts["MirrorPad"], counts["Conv2D"], counts["FusedPadConv2D"]) == (0, 0, 1)
    conv = _by_name(fused)["conv"]
    assert conv.op == "FusedPadConv2D"
    assert conv.input[0] == "x"
    assert conv.attr["mode"].s == b"REFLECT"
    assert conv.attr["padding"].s == b"VALID"
    assert list(conv.attr["strides"].list.i) == [1, 2, 2, 1]
    assert "dilations" not in conv.attr and "data_format" not in conv.attr


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_fuse_pad_and_conv_fused_pad_conv2d_gives_the_same_outputs(mode, padding):
    graph = _mirror_pad_conv(mode=mode, padding=padding)
    fused = _fuse(graph)
    assert op_counts(fused)["FusedPadConv2D"] == 1
    assert_same_outputs(graph, fused, {"x": SINGLE_IMAGE}, ["y"], atol=1e-5)


def test_fuse_pad_and_conv_writes_int64_mirror_paddings_as_int32():
    """FusedPadConv2D reads its paddings as int32; GTT would wire an int64 tensor in as is."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [1, 7, 7, 3], name="x")
        padded = tf.pad(x, tf.constant(HW_PADDINGS, tf.int64), mode="SYMMETRIC")
        tf.nn.conv2d(padded, _weights([3, 3, 3, 4]), 1, "VALID", name="y")
    graph = build_graph(body)
    fused = _fuse(graph)

    by_name = _by_name(fused)
    paddings = by_name[by_name["y"].input[1]]
    assert paddings.attr["dtype"].type == tf.int32.as_datatype_enum
    assert op_counts(fused)["Const"] == op_counts(graph)["Const"]  # the int64 one is gone
    assert_same_outputs(graph, fused, {"x": SINGLE_IMAGE}, ["y"], atol=1e-5)


def test_fuse_pad_and_conv_builds_the_same_fused_pad_conv2d_as_native_gtt():
    graph = _mirror_pad_conv(mode="SYMMETRIC")
    ours = _fuse(graph)
    gtt = transform_graph(graph, ["x"], ["y"], "fuse_pad_and_conv")
    assert sorted(n.SerializeToString(deterministic=True) for n in ours.node) == \
        sorted(n.SerializeToString(deterministic=True) for n in gtt.node)


def test_fuse_pad_and_conv_leaves_mirror_pads_fused_pad_conv2d_cannot_take():
    near_misses = {
        "channel padding": _mirror_pad_conv(paddings=[[0, 0], [1, 1], [1, 1], [0, 1]]),
        "EXPLICIT conv": _mirror_pad_conv(padding=[[0, 0], [1, 1], [1, 1], [0, 0]]),
        "dilated conv": _mirror_pad_conv(strides=1, dilations=2),
        # TF's kernel computes every batch element from the first (next test).
        "unknown batch": _mirror_pad_conv(shape=(None, 7, 7, 3)),
        "batch of 2": _mirror_pad_conv(shape=(2, 7, 7, 3)),
        "unknown width": _mirror_pad_conv(shape=(1, 7, None, 3)),
        # 3 rows x 6002 padded columns x 128 channels x 4 bytes > the kernel's 8 MiB row cache.
        "too wide for the kernel's buffers": _mirror_pad_conv(
            shape=(1, 3, 6000, 128), paddings=[[0, 0], [1, 1], [1, 1], [0, 0]], strides=1),
    }
    for why, graph in near_misses.items():
        fused = _fuse(graph)
        assert fused.SerializeToString(deterministic=True) == \
            graph.SerializeToString(deterministic=True), why


def test_tf_fused_pad_conv2d_kernel_computes_every_batch_element_from_the_first():
    """Why a MirrorPad is fused only at a static batch size of 1. If this starts failing, TF
    fixed its kernel and the batch precondition can go."""
    filters = _weights([3, 3, 3, 4])
    expected = tf.nn.conv2d(tf.pad(IMAGE, HW_PADDINGS, mode="REFLECT"), filters, 1, "VALID")
    actual = tf.raw_ops.FusedPadConv2D(input=IMAGE, paddings=HW_PADDINGS, filter=filters,
                                       mode="REFLECT", strides=[1, 1, 1, 1], padding="VALID")
    np.testing.assert_allclose(actual[0], expected[0], atol=1e-5)
    np.testing.assert_allclose(actual[1], expected[0], atol=1e-5)
    assert np.abs(actual[1] - expected[1]).max() > 1.0


def test_fuse_pad_and_conv_leaves_a_mirror_pad_whose_output_is_read_elsewhere():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [1, 7, 7, 3], name="x")
        padded = tf.pad(x, HW_PADDINGS, mode="REFLECT")
        tf.nn.conv2d(padded, _weights([3, 3, 3, 4]), 1, "VALID", name="y")
        tf.identity(padded, name="padded")
    graph = build_graph(body)
    fused = _fuse(graph, outputs=("y", "padded"))
    assert fused.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_fuse_pad_and_conv_twice_changes_nothing_on_a_mirror_pad():
    once = assert_idempotent(make_transform("fuse_pad_and_conv"), _mirror_pad_conv(),
                             context(["x"], ["y"]))
    assert op_counts(once)["FusedPadConv2D"] == 1


class _MirrorPaddedConv(tf.Module):
    def __init__(self):
        super().__init__()
        self.filters = tf.Variable(_weights([3, 3, 3, 8]))
        self.bias = tf.Variable(_weights([8]))

    @tf.function(input_signature=[tf.TensorSpec([1, 9, 9, 3], tf.float32, name="image")])
    def __call__(self, image):
        padded = tf.pad(image, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT")
        return {"features": tf.nn.relu(tf.nn.conv2d(padded, self.filters, 1, "VALID")
                                       + self.bias)}


def test_fuse_pad_and_conv_fused_pad_conv2d_survives_a_saved_model_round_trip(tmp_path):
    module = _MirrorPaddedConv()
    tf.saved_model.save(module, str(tmp_path / "source"),
                        signatures={"serving_default": module.__call__})
    model = freeze(tmp_path / "source")

    fused, _ = run_transforms(model, [make_transform("fuse_pad_and_conv")])
    assert op_counts(fused.graph_def)["FusedPadConv2D"] == 1
    write_saved_model(fused, tmp_path / "fused")

    reloaded = load_runner(tmp_path / "fused")  # tf.saved_model.load + its signature
    report = compare(tmp_path / "source", reloaded, batches=2, batch_size=1)
    assert report.within(atol=1e-5), report.summary()
