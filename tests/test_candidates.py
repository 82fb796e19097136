"""Candidates beyond the optimized graph: built per target, tagged, loadable; a candidate this
machine or model cannot have is skipped with its reason, never fatal."""

import json

import numpy as np
import pytest

from tfopt.optimizer.candidates.build import CandidateSettings, derive_candidates, parse_targets
from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.inputs.calibration import from_rows
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.system.cpu_features import cpu_supports_bf16
from tfopt.optimizer.verify.evaluation import load_labelled_data, top1_accuracy


@pytest.fixture(scope="module")
def digits(digits_model):
    return digits_model


@pytest.fixture(scope="module")
def built(digits, tmp_path_factory):
    signature = get_signature(digits.saved_model)
    data = load_labelled_data(digits.eval_data, signature)
    made, skipped = derive_candidates(
        digits.saved_model, freeze(digits.saved_model), tmp_path_factory.mktemp("candidates"),
        CandidateSettings(targets=("savedmodel", "litert")),
        calibration=from_rows(signature, data.x, 50, source=f"eval data {data.source}"))
    return {c.label: c for c in made}, {s.label: s.reason for s in skipped}, data


def test_both_targets_give_every_variant_tagged_with_its_format_and_runtime(built):
    made, skipped, _ = built
    expected = {"xla", "litert_fp32", "litert_fp16", "litert_dynamic_int8", "litert_full_int8"}
    if cpu_supports_bf16():
        expected.add("bf16")
    else:
        assert "bf16" in skipped and "bfloat16" in skipped["bf16"]
    assert set(made) == expected
    for candidate in made.values():
        if candidate.target == "litert":
            assert (candidate.format, candidate.runtime) == ("tflite", "ai-edge-litert")
            assert candidate.path.endswith("model.tflite")
            assert (candidate.artifact_dir / "model.tflite.json").is_file()
            assert "Interpreter(model_path='model.tflite'" in candidate.how_to_load
        else:
            assert candidate.format == "savedmodel" and candidate.target == "savedmodel"
            assert "tf.saved_model.load(path)" in candidate.how_to_load
    assert made["xla"].runtime == "tensorflow+xla"
    assert "--xla_cpu_compilation_enabled" in made["xla"].how_to_load


def test_every_candidate_runs_and_keeps_held_out_accuracy_within_half_a_point(built, digits):
    made, _, data = built
    source = top1_accuracy(load_runner(digits.saved_model), data.x, data.y)
    for label, candidate in made.items():
        accuracy = top1_accuracy(load_runner(candidate.path), data.x, data.y)
        assert accuracy >= source - 0.005, f"{label}: {accuracy:.4f} vs {source:.4f}"


def test_only_the_calibrated_candidate_says_it_was_calibrated_on_data(built):
    made, _, _ = built
    assert {label: c.calibration for label, c in made.items() if c.calibration} == {
        "litert_full_int8": "data"}
    manifest = json.loads((made["litert_full_int8"].artifact_dir
                           / "model.tflite.json").read_text())
    assert manifest["calibration_source"].startswith("eval data ")


def test_full_int8_without_calibration_data_calibrates_on_generated_inputs_tagged_synthetic(
        digits, tmp_path):
    made, skipped = derive_candidates(
        digits.saved_model, freeze(digits.saved_model), tmp_path,
        CandidateSettings(targets=("litert",), litert_flavours=("fp32", "full_int8"),
                          calibration_samples=20))
    assert skipped == []
    assert [(c.label, c.calibration) for c in made] == [("litert_fp32", None),
                                                         ("litert_full_int8", "synthetic")]
    manifest = json.loads((made[1].artifact_dir / "model.tflite.json").read_text())
    assert (manifest["calibration_source"], manifest["calibration_samples"]) == ("synthetic", 20)
    assert json.loads((made[0].artifact_dir / "model.tflite.json").read_text())[
        "calibration_source"] is None


def test_a_savedmodel_only_target_builds_no_litert_file(digits, tmp_path):
    made, _ = derive_candidates(digits.saved_model, freeze(digits.saved_model), tmp_path,
                                CandidateSettings(targets=("savedmodel",),
                                                  savedmodel_variants=("xla",)))
    assert [c.label for c in made] == ["xla"]
    assert not list(tmp_path.rglob("*.tflite"))


def test_targets_name_every_runtime_and_say_when_calibration_is_needed():
    assert parse_targets("savedmodel, onnx,openvino") == ("savedmodel", "onnx", "openvino")
    assert not CandidateSettings(targets=("onnx",), onnx_flavours=("fp32",)).calibrates
    assert CandidateSettings(targets=("openvino",)).calibrates  # int8 by default
    assert not CandidateSettings(targets=("savedmodel",)).calibrates


@pytest.mark.parametrize("text, message", [
    ("savedmodel,tensorrt", "unknown target 'tensorrt'"),
    ("", "at least one target"),
])
def test_unknown_or_missing_targets_are_one_line_errors(text, message):
    with pytest.raises(InvalidInputsError, match=message):
        parse_targets(text)


def test_calibration_draws_single_rows_spread_over_the_data():
    from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo

    signature = SignatureInfo(name="serving_default",
                              inputs=(TensorSpecInfo("x", "x:0", "float32", (None, 2)),),
                              outputs=(TensorSpecInfo("y", "y:0", "float32", (None, 1)),))
    x = np.arange(200, dtype=np.float32).reshape(100, 2)
    calibration = from_rows(signature, x, 10, source="eval data x.npz")
    feeds = calibration.feeds
    assert not calibration.synthetic and calibration.tag == "data"
    assert len(feeds) == 10 and all(f["x"].shape == (1, 2) for f in feeds)
    firsts = sorted(int(f["x"][0, 0]) for f in feeds)
    assert firsts != list(range(0, 20, 2))  # not simply the first rows
    assert len(set(firsts)) == 10


def test_a_big_models_dominated_flavours_are_skipped_with_the_flavour_that_beats_them(
        model_dir, tmp_path):
    import shutil

    from tfopt.optimizer.candidates.build import SKIP_DOMINATED_FROM_BYTES, dominated_skips
    from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget

    small = model_dir("keras_cnn")
    settings = CandidateSettings(targets=("litert", "onnx"))
    assert dominated_skips(small, settings) == []  # built and measured as before
    big = tmp_path / "big"
    shutil.copytree(small, big)
    (big / "variables" / "padding.data").write_bytes(b"\0" * SKIP_DOMINATED_FROM_BYTES)
    reasons = {s.label: s.reason for s in dominated_skips(big, settings)}
    assert set(reasons) == {"litert_fp16", "onnx_fp32"}
    assert "no faster than litert_fp32" in reasons["litert_fp16"]
    assert "onnx_optimized" in reasons["onnx_fp32"]
    # only beside the flavour that beats it
    assert dominated_skips(big, CandidateSettings(targets=("litert",),
                                                  litert_flavours=("fp16",))) == []
    # derive_candidates lists them as skipped and plans no build for them (the budget here
    # refuses every build, so that nothing is converted)
    made, skipped = derive_candidates(
        big, freeze(small), tmp_path / "candidates",
        CandidateSettings(targets=("litert",), litert_flavours=("fp32", "fp16")),
        in_workers=True, budget=MemoryBudget(GIB // 4, "test"))
    assert made == []
    assert [(s.label, "not built for a model of" in s.reason) for s in skipped] == [
        ("litert_fp16", True), ("litert_fp32", False)]


def test_the_flavours_of_one_runtime_are_built_by_one_worker_and_each_variant_by_its_own():
    from tfopt.optimizer.candidates.build import planned_builds

    assert planned_builds(CandidateSettings(targets=("savedmodel", "litert", "onnx"),
                                            onnx_flavours=("optimized", "static_int8"))) == [
        ("bf16",), ("xla",),
        ("litert_fp32", "litert_fp16", "litert_dynamic_int8", "litert_full_int8"),
        ("onnx_optimized", "onnx_static_int8")]
