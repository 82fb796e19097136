import re

import numpy as np
import pytest
from graph_testing import assert_idempotent, build_graph, context, op_counts, run_graph, tf

from tfopt.optimizer.graph.traversal import nodes_by_name
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.base import TransformRefused
from tfopt.optimizer.transforms.pipeline import context_for
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.transforms.timing import median_run_seconds, placeholder_feeds
from tfopt.optimizer.verify.equivalence import compare

RNG = np.random.default_rng(0)
FILTER = RNG.standard_normal((3, 3, 3, 8)).astype(np.float32)
MATRIX = RNG.standard_normal((8, 16)).astype(np.float32)


def _conv_graph(dilations=1):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        conv = tf.nn.conv2d(x, tf.constant(FILTER, name="filter"), 1, "VALID",
                            dilations=dilations, name="conv")
        tf.nn.relu(conv, name="y")
    return build_graph(body)


def _matmul_graph(weight_is_constant=True):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="x")
        w = tf.constant(MATRIX, name="weights") if weight_is_constant else \
            tf.compat.v1.placeholder(tf.float32, [8, 16], name="weights")
        tf.nn.relu(tf.matmul(x, w, transpose_b=True, name="matmul"), name="y")
    return build_graph(body)


def _eight_bit_bound(x, x_step, w, w_step, k_terms):
    """Worst-case error of an 8-bit dot product of length ``k_terms``, elementwise-free form:
    each activation moves by at most one step (QuantizeV2 may round either way), each weight by
    half a step (quantized offline with exact rounding), so one product term moves by at most
    |x| w_step / 2 + |w| x_step + x_step w_step / 2."""
    return k_terms * (np.abs(x).max() * w_step / 2 + np.abs(w).max() * x_step
                      + x_step * w_step / 2)


def test_quantize_nodes_replaces_conv2d_by_quantized_conv2d_under_the_same_name():
    graph = _conv_graph()
    quantized = make_transform("quantize_nodes", force=True)(graph, context(["x"], ["y"]))

    counts = op_counts(quantized)
    assert counts["Conv2D"] == 0
    assert counts["QuantizedConv2D"] == 1 and counts["QuantizeV2"] == 1
    assert counts["Min"] == 1 and counts["Max"] == 1  # the activation range, computed in-graph
    nodes = nodes_by_name(quantized)
    assert nodes["conv"].op == "Dequantize"  # the Relu still reads "conv"
    assert nodes["conv/eightbit"].op == "QuantizedConv2D"
    assert nodes["conv_eightbit/x/quantize"].attr["mode"].s == b"MIN_FIRST"
    # The filter is quantized offline; the float copy nothing reads any more is gone.
    assert nodes["filter_quantized_const"].attr["dtype"].type == tf.quint8.as_datatype_enum
    assert "filter" not in nodes


def test_quantize_nodes_conv2d_outputs_stay_within_the_8_bit_bound():
    graph = _conv_graph()
    quantized = make_transform("quantize_nodes", force=True)(graph, context(["x"], ["y"]))
    x = RNG.standard_normal((4, 8, 8, 3)).astype(np.float32)
    x_step = (max(x.max(), 0) - min(x.min(), 0)) / 255
    w_step = (max(FILTER.max(), 0) - min(FILTER.min(), 0)) / 255
    atol = _eight_bit_bound(x, x_step, FILTER, w_step, k_terms=3 * 3 * 3)
    before, = run_graph(graph, {"x": x}, ["y"])
    after, = run_graph(quantized, {"x": x}, ["y"])
    gap = np.abs(after - before).max()
    assert 0 < gap <= atol, (gap, atol)


def test_quantize_nodes_matmul_with_transposed_weight_stays_within_the_8_bit_bound():
    graph = _matmul_graph()
    quantized = make_transform("quantize_nodes", force=True)(graph, context(["x"], ["y"]))
    assert op_counts(quantized)["QuantizedMatMul"] == 1
    assert nodes_by_name(quantized)["matmul/eightbit"].attr["transpose_b"].b
    x = RNG.standard_normal((5, 16)).astype(np.float32)
    x_step = (max(x.max(), 0) - min(x.min(), 0)) / 255
    w_step = (max(MATRIX.max(), 0) - min(MATRIX.min(), 0)) / 255
    atol = _eight_bit_bound(x, x_step, MATRIX, w_step, k_terms=16)
    before, = run_graph(graph, {"x": x}, ["y"])
    after, = run_graph(quantized, {"x": x}, ["y"])
    assert 0 < np.abs(after - before).max() <= atol


def test_quantize_nodes_leaves_dilated_convs_and_non_constant_weights_alone():
    """QuantizedConv2D has no dilation support; a MatMul of two activations has no weight to
    quantize offline. Neither graph changes, and no timing happens."""
    for graph in (_conv_graph(dilations=2), _matmul_graph(weight_is_constant=False)):
        inputs = [n.name for n in graph.node if n.op == "Placeholder"]
        result = make_transform("quantize_nodes")(graph, context(inputs, ["y"]))
        assert result.SerializeToString(deterministic=True) == \
            graph.SerializeToString(deterministic=True)


def test_quantize_nodes_reuses_weights_quantize_weights_already_stored_as_8_bit():
    ctx = context(["x"], ["y"])
    stored = make_transform("quantize_weights", minimum_size=1)(_conv_graph(), ctx)
    quantized = make_transform("quantize_nodes", force=True)(stored, ctx)
    assert op_counts(quantized)["QuantizedConv2D"] == 1
    conv = nodes_by_name(quantized)["conv/eightbit"]
    assert conv.input[1] == "filter_quantized_const"
    assert "filter" not in nodes_by_name(quantized)  # its Dequantize became unread


def test_quantize_nodes_twice_changes_nothing():
    assert_idempotent(make_transform("quantize_nodes", force=True), _conv_graph(),
                      context(["x"], ["y"]))


def test_quantize_nodes_refuses_with_both_medians_when_below_min_speedup():
    """No 8-bit graph is a million times faster, so this always takes the refusal branch."""
    graph = _conv_graph()
    snapshot = graph.SerializeToString(deterministic=True)
    with pytest.raises(TransformRefused) as refused:
        make_transform("quantize_nodes", min_speedup=1e6)(graph, context(["x"], ["y"]))
    message = str(refused.value)
    assert message.startswith("quantize_nodes refused: the 8-bit graph is ")
    assert re.search(r"\d+(\.\d+)?x (slower|faster)", message), message
    assert re.search(r"p50 \d+\.\d+ ms 8-bit vs \d+\.\d+ ms fp32", message), message
    assert graph.SerializeToString(deterministic=True) == snapshot


def test_quantize_nodes_on_keras_cnn_refuses_with_the_measured_ratio_or_is_equivalent(
        model_dir):
    """Whichever branch the measurement takes must be well formed: a refusal states the ratio
    and both medians; an accepted graph keeps top-1 and stays within 5e-2 of the float
    probabilities (two 8-bit convolutions and an 8-bit dense layer)."""
    model = freeze(model_dir("keras_cnn"))
    try:
        graph = make_transform("quantize_nodes")(model.graph_def, context_for(model))
    except TransformRefused as refused:
        message = str(refused)
        match = re.search(r"(\d+(?:\.\d+)?)x (slower|faster).*p50 (\d+\.\d+) ms 8-bit vs "
                          r"(\d+\.\d+) ms fp32", message)
        assert match, message
        ratio, eight_bit_ms, float_ms = (float(match[i]) for i in (1, 3, 4))
        assert ratio > 0 and eight_bit_ms > 0 and float_ms > 0
        if match[2] == "slower":
            assert eight_bit_ms > float_ms
        return
    assert op_counts(graph)["QuantizedConv2D"] == 2
    report = compare(model, model.with_graph(graph, "quantize_nodes"), batches=4, batch_size=16)
    assert report.max_abs_diff < 5e-2 and report.top1_agreement >= 0.9, report.summary()


def test_quantize_nodes_with_force_keeps_keras_cnn_predictions(model_dir):
    """Same bound as the accepted branch above: probabilities within 5e-2, top-1 kept."""
    model = freeze(model_dir("keras_cnn"))
    graph = make_transform("quantize_nodes", force=True)(model.graph_def, context_for(model))
    counts = op_counts(graph)
    assert counts["QuantizedConv2D"] == 2 and counts["QuantizedMatMul"] == 1
    assert counts["Conv2D"] == 0 and counts["MatMul"] == 0
    report = compare(model, model.with_graph(graph, "quantize_nodes"), batches=4, batch_size=16)
    assert report.max_abs_diff < 5e-2 and report.top1_agreement >= 0.9, report.summary()


def test_timing_gives_one_positive_median_per_graph():
    graph = _conv_graph()
    feeds = placeholder_feeds(graph, ["x"], batch_size=2)
    assert feeds["x"].shape == (2, 8, 8, 3)
    medians = median_run_seconds([graph, graph], feeds, ["y"], runs=3, warmup=1)
    assert len(medians) == 2 and all(m > 0 for m in medians)
