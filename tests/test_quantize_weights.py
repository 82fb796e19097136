import numpy as np
from graph_testing import (
    assert_idempotent,
    assert_same_outputs,
    build_graph,
    context,
    op_counts,
    run_graph,
    tf,
)

from tfopt.optimizer.graph.consts import values_from_const
from tfopt.optimizer.graph.quantization import dequantize_min_first, min_first_range, step_size
from tfopt.optimizer.graph.traversal import nodes_by_name
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.pipeline import context_for
from tfopt.optimizer.transforms.quantize_weights import size_report
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

RNG = np.random.default_rng(0)
WEIGHTS = RNG.standard_normal((64, 64)).astype(np.float32)


def _matmul_graph(weights=WEIGHTS):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, weights.shape[0]], name="x")
        w = tf.constant(weights, name="weights")
        bias = tf.constant(np.linspace(-1, 1, weights.shape[1], dtype=np.float32), name="bias")
        tf.nn.bias_add(tf.matmul(x, w), bias, name="y")
    return build_graph(body)


def test_quantize_weights_stores_a_large_weight_as_8_bit_under_its_own_name():
    graph = _matmul_graph()
    quantized = make_transform("quantize_weights")(graph, context(["x"], ["y"]))

    nodes = nodes_by_name(quantized)
    assert nodes["weights"].op == "Dequantize"
    assert nodes["weights"].attr["mode"].s == b"MIN_FIRST"
    assert list(nodes["weights"].input) == [
        "weights_quantized_const", "weights_quantized_min", "weights_quantized_max"]
    assert nodes["weights_quantized_const"].attr["dtype"].type == tf.quint8.as_datatype_enum
    assert nodes["bias"].op == "Const"  # 64 elements < minimum_size 1024
    assert op_counts(quantized)["Dequantize"] == 1
    assert op_counts(quantized)["Const"] == op_counts(graph)["Const"] + 2
    # The matmul still reads the same name; nothing downstream was rewired.
    matmul = next(n for n in quantized.node if n.op == "MatMul")
    assert "weights" in list(matmul.input)


def test_quantize_weights_shrinks_the_graph_about_4x_when_the_weight_dominates_it():
    graph = _matmul_graph()
    quantized = make_transform("quantize_weights")(graph, context(["x"], ["y"]))
    report = size_report(graph, quantized)
    assert report.consts_quantized == 1
    # The weight's 4096 floats (16 KiB) become 4096 bytes: 3 bytes saved per element, less a
    # few hundred bytes for the min/max constants and the Dequantize node.
    saved = report.bytes_before - report.bytes_after
    assert 3 * 4096 - 512 < saved < 3 * 4096, str(report)
    assert report.ratio > 3, str(report)
    assert "1 float32 constant(s) stored as 8-bit" in str(report)


def test_quantize_weights_stores_values_within_half_a_step():
    quantized = make_transform("quantize_weights")(_matmul_graph(), context(["x"], ["y"]))
    nodes = nodes_by_name(quantized)
    lo = float(values_from_const(nodes["weights_quantized_min"]))
    hi = float(values_from_const(nodes["weights_quantized_max"]))
    assert (lo, hi) == min_first_range(WEIGHTS)
    levels = values_from_const(nodes["weights_quantized_const"])
    restored = dequantize_min_first(levels.view(np.uint8), lo, hi)
    assert np.abs(restored - WEIGHTS).max() <= step_size(lo, hi) / 2 + 1e-6


def test_quantize_weights_leaves_a_const_just_under_minimum_size_alone():
    graph = _matmul_graph(RNG.standard_normal((31, 32)).astype(np.float32))  # 992 < 1024
    result = make_transform("quantize_weights")(graph, context(["x"], ["y"]))
    assert op_counts(result)["Dequantize"] == 0
    assert result.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_quantize_weights_quantizes_a_const_of_exactly_minimum_size():
    graph = _matmul_graph(RNG.standard_normal((32, 32)).astype(np.float32))  # 1024
    result = make_transform("quantize_weights")(graph, context(["x"], ["y"]))
    assert nodes_by_name(result)["weights"].op == "Dequantize"


def test_quantize_weights_leaves_boundary_and_non_float_consts_alone():
    def body():
        tf.constant(np.ones((64, 64), np.float32), name="table")  # an output of the graph
        tf.constant(np.ones((64, 64), np.int32), name="ids")
        tf.constant(np.ones((64, 64), np.float16), name="half")
    graph = build_graph(body)
    result = make_transform("quantize_weights", minimum_size=1)(
        graph, context([], ["table", "ids", "half"]))
    assert op_counts(result)["Dequantize"] == 0


def test_quantize_weights_leaves_consts_whose_exact_value_sets_a_shape_alone():
    def body():
        start, limit, delta = (tf.constant(v, name=n) for v, n in
                               ((0.0, "start"), (5.0, "limit"), (0.3, "delta")))
        tf.identity(tf.range(start, limit, delta), name="y")
    graph = build_graph(body)
    result = make_transform("quantize_weights", minimum_size=1)(graph, context([], ["y"]))
    assert op_counts(result)["Dequantize"] == 0
    assert_same_outputs(graph, result, {}, ["y"], atol=0)


def test_quantize_weights_keeps_outputs_within_the_8_bit_bound():
    """Tolerance: each weight moves by at most half a step s = (max - min) / 255, so each output
    of x @ W moves by at most s / 2 * sum_i |x_i|; the bound uses the largest row sum of |x|,
    plus 1e-5 for float32 rounding in the two matmuls."""
    graph = _matmul_graph()
    quantized = make_transform("quantize_weights")(graph, context(["x"], ["y"]))
    x = RNG.standard_normal((16, 64)).astype(np.float32)
    lo, hi = min_first_range(WEIGHTS)
    atol = step_size(lo, hi) / 2 * float(np.abs(x).sum(axis=1).max()) + 1e-5
    assert_same_outputs(graph, quantized, {"x": x}, ["y"], atol=atol)
    # ...and the bound is not vacuous: the outputs do change.
    before, = run_graph(graph, {"x": x}, ["y"])
    after, = run_graph(quantized, {"x": x}, ["y"])
    assert 0 < np.abs(after - before).max() < atol


def test_quantize_weights_twice_changes_nothing_even_for_the_range_scalars():
    """With minimum_size=1 the second run sees the scalar min/max consts; they are read by the
    Dequantize as exact ranges, so they stay float and nothing is quantized twice."""
    once = assert_idempotent(make_transform("quantize_weights", minimum_size=1), _matmul_graph(),
                             context(["x"], ["y"]))
    assert op_counts(once)["Dequantize"] == 2  # weights and bias


def test_quantize_weights_does_not_mutate_its_input():
    graph = _matmul_graph()
    snapshot = graph.SerializeToString(deterministic=True)
    make_transform("quantize_weights")(graph, context(["x"], ["y"]))
    assert graph.SerializeToString(deterministic=True) == snapshot


def test_quantize_weights_on_keras_cnn_keeps_predictions_and_shrinks_the_saved_model(
        model_dir, tmp_path):
    """keras_cnn's weights are small (the largest has 216 elements), so minimum_size=100: below
    that the three extra nodes per constant outweigh the 3 bytes saved per element.

    Tolerance: the outputs are softmax probabilities. 8-bit weights err by at most 1/510 of
    each weight's range; over the model's three weighted layers that is about 1% of the
    logits, and a softmax moves by at most 1/4 of a logit change, so probabilities move by well
    under 1e-2, which is asserted, with top-1 agreement on 64 inputs of at least 0.95.
    """
    model = freeze(model_dir("keras_cnn"))
    quantized_graph = make_transform("quantize_weights", minimum_size=100)(
        model.graph_def, context_for(model))
    candidate = model.with_graph(quantized_graph, "quantize_weights(minimum_size=100)")
    assert op_counts(quantized_graph)["Dequantize"] == 2  # the two Conv2D filters

    report = compare(model, candidate, batches=4, batch_size=16)
    assert report.max_abs_diff < 1e-2, report.summary()
    assert report.top1_agreement >= 0.95, report.summary()

    before = write_saved_model(model, tmp_path / "float") / "saved_model.pb"
    after = write_saved_model(candidate, tmp_path / "eight_bit") / "saved_model.pb"
    assert after.stat().st_size < before.stat().st_size
    assert size_report(model.graph_def, quantized_graph).bytes_after < model.graph_def.ByteSize()
