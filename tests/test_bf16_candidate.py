"""The bfloat16 candidate: bfloat16 ops really in the graph, outputs within bfloat16's precision,
held-out accuracy kept, and the written SavedModel reloads and serves with the same signature.

Tolerances: bfloat16 keeps 8 significant bits (relative rounding 2^-9, about 2e-3, per op).
On keras_cnn the softmax outputs are asserted within 2e-2 of their scale (measured 1.8e-3; ten
times that leaves room for other CPUs' bfloat16 kernels, AMX or AVX512_BF16, accumulating in
another order) and top-1 agreement at least 0.9 on random inputs (measured 1.0). On real data
the digits model's held-out top-1 may drop by at most 0.5 points (measured: no change, 0.9756
both, max relative output difference 8e-3).
"""

import numpy as np
import pytest
from graph_testing import build_graph, tf

import tfopt.optimizer.transforms.grappler as grappler_module
from tfopt.optimizer.candidates.bf16 import (
    BF16_PASSES,
    BF16_PROVENANCE,
    Bf16Refused,
    bf16_mixed_precision,
    bfloat16_nodes,
    pack_bfloat16_constants,
)
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.model.export import read_provenance, write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.system.cpu_features import cpu_supports_bf16
from tfopt.optimizer.verify.equivalence import compare
from tfopt.optimizer.verify.evaluation import evaluate, load_labelled_data

needs_bf16_cpu = pytest.mark.skipif(
    not cpu_supports_bf16(), reason="needs a CPU with native bfloat16 (avx512_bf16/amx_bf16); "
    "the refusal elsewhere is tested by test_a_cpu_without_bfloat16_is_refused_with_the_reason")


@pytest.fixture(scope="module")
def cnn(model_dir):
    frozen = freeze(model_dir("keras_cnn"))
    return frozen, bf16_mixed_precision(frozen) if cpu_supports_bf16() else None


@needs_bf16_cpu
def test_convolutions_and_the_dense_layer_run_in_bfloat16(cnn):
    frozen, candidate = cnn
    bf16_ops = {n.op for n in candidate.graph_def.node if n.name in
                set(bfloat16_nodes(candidate.graph_def))}
    assert {"Conv2D", "DepthwiseConv2dNative", "MatMul"} <= bf16_ops
    assert not bfloat16_nodes(frozen.graph_def)
    assert candidate.signature == frozen.signature
    assert candidate.history == (*frozen.history, "bf16_mixed_precision")
    assert "remap" not in BF16_PASSES  # bfloat16 _Fused* nodes would not load
    assert not [n.name for n in candidate.graph_def.node  # packed, 2 bytes a value
                if n.op == "Const" and len(n.attr["value"].tensor.half_val) > 1]


def test_bfloat16_constants_are_packed_two_bytes_a_value_with_the_same_values():
    values = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    graph_def = build_graph(lambda: (
        tf.constant(values, dtype=tf.bfloat16, name="weights"),
        tf.constant(1.5, shape=(2, 2), dtype=tf.bfloat16, name="broadcast")))
    weights = next(n for n in graph_def.node if n.name == "weights").attr["value"].tensor
    weights.ClearField("tensor_content")  # as Grappler writes it: one int32 per value
    weights.half_val.extend(np.frombuffer(values.astype(tf.bfloat16.as_numpy_dtype).tobytes(),
                                          "<u2").tolist())
    assert pack_bfloat16_constants(graph_def) == 1
    assert not weights.half_val and len(weights.tensor_content) == 2 * values.size
    np.testing.assert_array_equal(tf.make_ndarray(weights).astype(np.float32), values)
    broadcast = next(n for n in graph_def.node if n.name == "broadcast").attr["value"].tensor
    np.testing.assert_array_equal(tf.make_ndarray(broadcast).astype(np.float32),
                                  np.full((2, 2), 1.5, np.float32))


@needs_bf16_cpu
def test_outputs_stay_within_bfloat16_precision_of_float32(cnn):
    frozen, candidate = cnn
    report = compare(frozen, candidate, batches=4, batch_size=16)
    assert report.max_rel_diff < 2e-2 and report.top1_agreement >= 0.9, report.summary()
    assert report.max_abs_diff > 0, "identical outputs: the bfloat16 ops did not run"


@needs_bf16_cpu
def test_an_lstm_s_loops_are_lowered_first_and_its_matmuls_run_in_bfloat16(model_dir):
    """On the functional loops, the bfloat16 pass retyped the main graph's TensorLists but not
    the body writing them, and the first call failed; lowered first, the loop computes."""
    frozen = freeze(model_dir("keras_lstm"))
    candidate = bf16_mixed_precision(frozen)
    assert "While" not in candidate.op_counts() and candidate.op_counts()["Enter"] > 0
    assert bfloat16_nodes(candidate.graph_def)
    report = compare(frozen, candidate, batches=2, batch_size=4)
    assert 0 < report.max_rel_diff < 2e-2, report.summary()


@needs_bf16_cpu
def test_the_saved_model_round_trips_and_serves_with_the_same_signature(cnn, model_dir,
                                                                        tmp_path):
    frozen, candidate = cnn
    saved = write_saved_model(candidate, tmp_path / "bf16", metadata=BF16_PROVENANCE)
    assert get_signature(saved).same_contract(get_signature(model_dir("keras_cnn")))
    assert read_provenance(saved)["steps"][-1] == "bf16_mixed_precision"
    assert "avx512_bf16" in read_provenance(saved)["serving_cpu_needs"]

    served = tf.saved_model.load(str(saved)).signatures["serving_default"]
    reference = load_runner(frozen)
    for batch in (1, 8):
        feeds = make_inputs(frozen.signature, batch, seed=batch)
        out = served(image=tf.constant(feeds["image"]))["output_0"].numpy()
        assert out.dtype == np.float32 and out.shape == (batch, 5)
        expected = reference(feeds)["output_0"]
        assert np.max(np.abs(out - expected)) < 2e-2 * np.max(np.abs(expected))


@needs_bf16_cpu
def test_digits_held_out_top1_drops_by_at_most_half_a_point(tmp_path, digits_model):
    digits = digits_model
    frozen = freeze(digits.saved_model)
    saved = write_saved_model(bf16_mixed_precision(frozen), tmp_path / "digits_bf16")
    data = load_labelled_data(digits.eval_data)
    fp32 = evaluate(load_runner(frozen), data)
    bf16 = evaluate(load_runner(saved), data)
    assert fp32 > 0.9, "the digits model did not train; the comparison would say nothing"
    assert fp32 - bf16 <= 0.005, f"top-1 {fp32:.4f} -> {bf16:.4f}"


def test_a_cpu_without_bfloat16_is_refused_with_the_reason(model_dir, monkeypatch):
    monkeypatch.setattr(grappler_module, "cpu_supports_bf16", lambda: False)
    with pytest.raises(Bf16Refused, match="avx512_bf16 or amx_bf16") as refused:
        bf16_mixed_precision(freeze(model_dir("keras_cnn")))
    assert refused.value.exit_code == 2


def _add_only_model() -> FrozenModel:
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        tf.add(x, 1.0, name="y")
    return FrozenModel(build_graph(body), SignatureInfo(
        "serving_default", (TensorSpecInfo("x", "x:0", "float32", (None, 4)),),
        (TensorSpecInfo("y", "y:0", "float32", (None, 4)),)))


@needs_bf16_cpu
def test_a_model_with_nothing_to_run_in_bfloat16_is_refused():
    with pytest.raises(Bf16Refused, match="converted no op to bfloat16"):
        bf16_mixed_precision(_add_only_model())


def _dense_layer_norm_softmax_model() -> FrozenModel:
    """A dense layer, then LayerNormalization as Keras 3 exports it, then Softmax."""
    weights = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)

    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="x")
        h = tf.matmul(x, tf.constant(weights))
        mean = tf.reduce_mean(h, -1, keepdims=True)
        variance = tf.reduce_mean(tf.math.squared_difference(h, tf.stop_gradient(mean)), -1,
                                  keepdims=True)
        tf.nn.softmax((h - mean) * tf.math.rsqrt(variance + 1e-12), name="y")
    return FrozenModel(build_graph(body), SignatureInfo(
        "serving_default", (TensorSpecInfo("x", "x:0", "float32", (None, 16)),),
        (TensorSpecInfo("y", "y:0", "float32", (None, 32)),)))


@needs_bf16_cpu
def test_normalizations_stay_float32_and_the_lists_are_restored(monkeypatch):
    variable = "TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD"
    monkeypatch.setenv(variable, "Exp")
    frozen = _dense_layer_norm_softmax_model()
    candidate = bf16_mixed_precision(frozen)

    bf16_ops = {n.op for n in candidate.graph_def.node
                if n.name in set(bfloat16_nodes(candidate.graph_def))}
    assert "MatMul" in bf16_ops
    assert not bf16_ops & {"SquaredDifference", "Rsqrt", "Softmax"}
    import os

    assert os.environ[variable] == "Exp"  # the user's own edit is back, ours gone
    report = compare(frozen, candidate, batches=2, batch_size=8)
    assert 0 < report.max_abs_diff < 2e-2, report.summary()
