"""ONNX Runtime and OpenVINO candidates of the digits CNN, end to end: built by the real converters
(int8 calibrated on the eval data), benchmarked against the SavedModel in one process, evaluated
on held-out digits and judged by the gate like every other candidate.

Bounds: the float flavours (onnx fp32 and optimized, openvino fp32) agree with the SavedModel
within 1e-5 of its softmax outputs; every flavour, int8 and bf16 included, keeps held-out top-1
within the gate's budget of half a point (measured here: no int8 or bf16 flavour lost more than
one digit of 450).
"""

import pytest

from tfopt.optimizer.benchmark.harness import BenchmarkConfig
from tfopt.optimizer.candidates.build import CandidateSettings, derive_candidates, parse_targets
from tfopt.optimizer.gate.selection import select_candidate
from tfopt.optimizer.gate.verdict import GateConfig
from tfopt.optimizer.inputs.calibration import from_rows
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.system.cpu_features import cpu_supports_bf16
from tfopt.optimizer.verify.evaluation import load_labelled_data

BUDGET = 0.005
QUICK = BenchmarkConfig(batch_sizes=(1,), warmup=3, min_runs=30, min_seconds=0.5)
FLOAT = {"onnx_fp32", "onnx_optimized", "openvino_fp32"}
EXPECTED = FLOAT | {"onnx_dynamic_int8", "onnx_static_int8", "openvino_int8"} | (
    {"openvino_bf16"} if cpu_supports_bf16() else set())


@pytest.fixture(scope="module")
def digits(digits_model):
    return digits_model


@pytest.fixture(scope="module")
def selected(digits, tmp_path_factory):
    signature = get_signature(digits.saved_model)
    data = load_labelled_data(digits.eval_data, signature)
    made, skipped = derive_candidates(
        digits.saved_model, freeze(digits.saved_model), tmp_path_factory.mktemp("candidates"),
        CandidateSettings(targets=parse_targets("onnx,openvino")),
        calibration=from_rows(signature, data.x, 100, source=f"eval data {data.source}"))
    selection = select_candidate(digits.saved_model, made,
                                 GateConfig(max_accuracy_drop_abs=BUDGET), QUICK,
                                 skipped=skipped, eval_data=data)
    return made, skipped, selection


def test_every_flavour_is_built_and_tagged_with_its_format_and_runtime(selected):
    made, skipped, _ = selected
    assert {c.label for c in made} == EXPECTED
    if not cpu_supports_bf16():
        assert [s.label for s in skipped] == ["openvino_bf16"]
    for candidate in made:
        runtime = {"onnx": "onnxruntime", "openvino": "openvino"}[candidate.target]
        assert (candidate.format, candidate.runtime) == (candidate.target, runtime)
        suffix = {"onnx": "model.onnx", "openvino": "model.xml"}[candidate.target]
        assert candidate.path.endswith(suffix)
        assert (candidate.artifact_dir / f"{suffix}.json").is_file()
        assert suffix in candidate.how_to_load


def test_each_is_benchmarked_and_judged_by_the_gate_against_the_savedmodel(selected):
    _, _, selection = selected
    rows = {r["label"]: r for r in selection.rows()}
    assert set(rows) == EXPECTED | {s.label for s in selection.skipped}
    for label in EXPECTED:
        row = rows[label]
        assert row["speedup"] > 0 and row["format"] in ("onnx", "openvino"), label
        assert row["verdict"] in ("chosen", "passed", "rejected"), label
        verdict = selection.decision.verdict(label)
        checks = {c.name: c for c in verdict.checks}
        assert checks["accuracy_drop_abs"].passed, (label, checks["accuracy_drop_abs"].reason)
    measured = {m.label: m for m in selection.result.candidates}
    assert {m.format for m in measured.values()} == {"onnx", "openvino"}
    assert all(m.num_threads is not None for m in measured.values())  # per-model threads
    if selection.chosen is not None:
        assert rows[selection.chosen.label]["verdict"] == "chosen"


def test_float_flavours_agree_with_the_savedmodel_and_all_keep_accuracy(selected):
    _, _, selection = selected
    baseline = selection.result.baseline.quality.value
    for measurement in selection.result.candidates:
        if measurement.label in FLOAT:
            assert measurement.fidelity.max_abs_diff <= 1e-5, measurement.label
        assert measurement.quality.value >= baseline - BUDGET, (
            measurement.label, measurement.quality.value, baseline)


def test_a_model_the_converters_refuse_is_skipped_with_the_op_named(model_dir, tmp_path):
    source = model_dir("igamma_module")
    made, skipped = derive_candidates(
        source, freeze(source), tmp_path,
        CandidateSettings(targets=("onnx", "openvino"), onnx_flavours=("fp32", "optimized"),
                          openvino_flavours=("fp32",)))
    assert made == []
    reasons = {s.label: s.reason for s in skipped}
    assert reasons == {
        "onnx_fp32": f"cannot convert {source} to ONNX: tf2onnx has no ONNX conversion for "
                     "Igamma",
        "onnx_optimized": f"cannot convert {source} to ONNX: tf2onnx has no ONNX conversion "
                          "for Igamma",
        "openvino_fp32": f"cannot convert {source} to OpenVINO: no OpenVINO conversion rule "
                         "for: Igamma"}
    assert list(tmp_path.iterdir()) == []


def test_without_calibration_data_the_calibrating_flavours_say_synthetic(digits, tmp_path):
    made, skipped = derive_candidates(
        digits.saved_model, freeze(digits.saved_model), tmp_path,
        CandidateSettings(targets=("onnx", "openvino"), onnx_flavours=("fp32", "static_int8"),
                          openvino_flavours=("int8",)))
    assert skipped == []
    assert {c.label: c.calibration for c in made} == {
        "onnx_fp32": None, "onnx_static_int8": "synthetic", "openvino_int8": "synthetic"}
