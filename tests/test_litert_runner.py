"""LiteRTRunner: a ``.tflite`` behind the SavedModel runner's interface, on XNNPACK, with the
threads it is given, at any batch size, and through the benchmark harness."""

import os

import numpy as np
import pytest

from tfopt.optimizer.benchmark.accuracy import evaluate_models
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
from tfopt.optimizer.candidates.litert.convert import convert_to_litert
from tfopt.optimizer.errors import InvalidInputsError, SourceNotFoundError, UnknownSignatureError
from tfopt.optimizer.runtime import load_runner, read_signature
from tfopt.optimizer.runtime.litert import CorruptLiteRTModelError, LiteRTRunner
from tfopt.optimizer.system.cpu_threads import available_cpus
from tfopt.optimizer.verify.evaluation import load_labelled_data

QUICK = BenchmarkConfig(batch_sizes=(1, 4), warmup=3, min_runs=20, min_seconds=0.2)


@pytest.fixture(scope="module")
def cnn(model_dir, tmp_path_factory):
    source = model_dir("keras_cnn")
    out = tmp_path_factory.mktemp("cnn_litert")
    return source, convert_to_litert(source, out / "cnn_fp32.tflite", "fp32").path


def images(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 16, 16, 3)).astype(np.float32)


def threads_now() -> int:
    return len(os.listdir("/proc/self/task"))


def test_a_tflite_path_loads_as_a_litert_runner_with_the_saved_models_signature(cnn):
    source, tflite = cnn
    runner, saved = load_runner(tflite), load_runner(source)
    assert isinstance(runner, LiteRTRunner)
    assert runner.signature.input_keys == saved.signature.input_keys == ["image"]
    assert runner.signature.output_keys == saved.signature.output_keys
    assert [s.dtype for s in runner.signature.inputs + runner.signature.outputs] == \
        [s.dtype for s in saved.signature.inputs + saved.signature.outputs]
    assert runner.signature.same_contract(saved.signature)
    assert read_signature(tflite) == runner.signature
    outputs = runner({"image": images(2)})
    assert set(outputs) == {"output_0"} and isinstance(outputs["output_0"], np.ndarray)


def test_the_xnnpack_delegate_takes_the_graph(cnn):
    runner = LiteRTRunner(cnn[1], num_threads=1)
    assert runner.xnnpack and runner.delegate_partitions == 1
    assert "XNNPACK delegate, 1 partition" in runner.description


def test_batch_1_and_batch_64_go_through_the_same_runner(cnn):
    source, tflite = cnn
    runner, saved = load_runner(tflite), load_runner(source)
    x = images(64)
    whole = runner({"image": x})["output_0"]
    assert whole.shape == (64, 5)
    np.testing.assert_allclose(whole, saved({"image": x})["output_0"], atol=1e-5)
    for rows in (1, 64, 7, 1):  # back and forth: each change of shape re-allocates
        np.testing.assert_allclose(runner({"image": x[:rows]})["output_0"], whole[:rows],
                                   atol=1e-6)
    tensors = runner.to_tensors({"image": x[:1]})
    assert [t.shape for t in tensors] == [(1, 16, 16, 3)]
    assert runner.call(tensors)["output_0"].shape == (1, 5)


def test_a_bound_call_returns_what_call_returns_for_every_runtime_convention(cnn):
    source, tflite = cnn
    feeds = {"image": images(1, seed=3)}
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.runtime.tensorflow import frozen_runner

    # by keyword (LiteRT, the SavedModel's signature), positional (a frozen graph)
    for runner in (load_runner(tflite), load_runner(source), frozen_runner(freeze(source))):
        tensors = runner.to_tensors(feeds)
        [key] = runner.signature.output_keys
        np.testing.assert_array_equal(runner.outputs(runner.bind(tensors)())[key],
                                      runner.outputs(runner.call(tensors))[key])


def test_num_threads_is_honoured_and_defaults_to_the_cpus_available(cnn):
    before = threads_now()
    single = LiteRTRunner(cnn[1], num_threads=1)
    assert threads_now() == before
    triple = LiteRTRunner(cnn[1], num_threads=3)
    assert threads_now() == before + 2  # XNNPACK's pool: the calling thread plus two workers
    assert single.num_threads == 1 and "num_threads=1" in single.description
    assert triple.num_threads == 3 and "num_threads=3" in triple.description
    assert load_runner(cnn[1]).num_threads == available_cpus().available
    with pytest.raises(InvalidInputsError, match="num_threads must be at least 1"):
        LiteRTRunner(cnn[1], num_threads=0)


def test_the_harness_times_a_tflite_candidate_against_its_saved_model(cnn, tmp_path):
    source, tflite = cnn
    np.savez(tmp_path / "eval.npz", x=images(40), y=np.arange(40) % 5)
    data = load_labelled_data(tmp_path / "eval.npz")
    # timed on the eval rows, then scored by the evaluate stage, as every door does
    result = evaluate_models(run_benchmark(Subject.baseline(source), [Subject.candidate(tflite)],
                                           QUICK, eval_data=data), data)
    candidate = result.candidates[0]
    assert candidate.label == "cnn_fp32.tflite"
    assert candidate.size_bytes == tflite.stat().st_size
    assert candidate.digest == model_digest(tflite)
    assert set(candidate.latency) == {1, 4}
    assert len(candidate.samples[1]) == len(result.baseline.samples[1])
    assert candidate.fidelity.max_abs_diff < 1e-5 and candidate.fidelity.top1_agreement == 1.0
    assert candidate.quality.value == result.baseline.quality.value
    assert result.ratios["cnn_fp32.tflite"][1].ratio > 0

    # A published LiteRT model can be the baseline (a champion) too.
    result = run_benchmark(Subject.baseline(tflite, "champion"), [Subject.candidate(source)],
                           BenchmarkConfig(warmup=2, min_runs=10, min_seconds=0.1),
                           eval_data=tmp_path / "eval.npz")
    assert result.baseline.size_bytes == tflite.stat().st_size


def test_bad_models_and_inputs_are_one_line_errors(cnn, tmp_path):
    with pytest.raises(SourceNotFoundError, match="no such LiteRT model"):
        load_runner(tmp_path / "missing.tflite")
    garbage = tmp_path / "garbage.tflite"
    garbage.write_bytes(b"not a flatbuffer" * 8)
    with pytest.raises(CorruptLiteRTModelError, match="cannot load LiteRT model") as caught:
        load_runner(garbage)
    assert "\n" not in str(caught.value)
    with pytest.raises(UnknownSignatureError, match="'predict' not found.*serving_default"):
        load_runner(cnn[1], "predict")
    runner = load_runner(cnn[1])
    with pytest.raises(InvalidInputsError, match="missing for signature"):
        runner({"pixels": images(1)})
    with pytest.raises(InvalidInputsError, match=r"shape \[1, 16, 16, 4\]"):
        runner({"image": np.zeros((1, 16, 16, 4), np.float32)})


def test_a_named_signature_with_two_inputs_and_a_scalar_converts_and_runs(model_dir, tmp_path):
    source = model_dir("tf_module_two_signatures")
    tflite = convert_to_litert(source, tmp_path / "calibrated.tflite", "fp32",
                               signature="calibrated").path
    runner, saved = load_runner(tflite, "calibrated"), load_runner(source, "calibrated")
    assert runner.signature.same_contract(saved.signature)
    assert [s.shape for s in runner.signature.inputs] == [(None, 4), ()]
    feeds = {"features": images(3).reshape(3, -1)[:, :4], "temperature": np.float32(2.0)}
    lite_out, saved_out = runner(feeds), saved(feeds)
    assert set(lite_out) == {"logits", "probabilities"}
    for key in lite_out:
        np.testing.assert_allclose(lite_out[key], saved_out[key], atol=1e-5)


def test_bound_calls_return_their_own_arrays_and_follow_the_buffers_through_shape_changes(cnn):
    runner = LiteRTRunner(cnn[1], num_threads=1)
    x = images(64, seed=5)
    first, second = (runner.bind(runner.to_tensors({"image": x[i:i + 1]})) for i in (0, 1))
    a = first()["output_0"]
    kept = a.copy()
    b = second()["output_0"]  # the same interpreter buffers, other values
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, kept)  # a copy, not a view of the output buffer
    whole = runner({"image": x})["output_0"]  # batch 64 re-sizes the buffers
    np.testing.assert_array_equal(first()["output_0"], kept)  # batch 1 again, re-sized back
    np.testing.assert_allclose(np.concatenate([kept, b]), whole[:2], atol=1e-6)
    assert runner({"image": x[:3]})["output_0"].shape == (3, 5)
    np.testing.assert_array_equal(second()["output_0"], b)
