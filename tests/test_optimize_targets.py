"""tfopt optimize --targets: candidates for the allowed runtimes, the gate's choice at DST, and
candidates.json saying what every candidate measured and why it was or was not chosen."""

import json

import numpy as np
import pytest
from cli_testing import (
    assert_chosen_is_the_fastest_or_a_more_precise_tie,
    assert_clean_failure,
    run_tfopt,
)

from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.verify.evaluation import load_labelled_data, top1_accuracy


@pytest.fixture(scope="module")
def digits(digits_model):
    return digits_model


def test_litert_allowed_writes_the_fastest_candidate_inside_the_budget(digits, tmp_path):
    dst = tmp_path / "out"
    done = run_tfopt("optimize", digits.saved_model, dst, "--targets", "savedmodel,litert",
                     "--eval-data", digits.eval_data, "--accuracy-budget", "0.005",
                     "--seconds", "2", timeout=600)
    assert done.returncode == 0, done.stderr
    listing = json.loads((dst / "candidates.json").read_text())
    rows = {r["label"]: r for r in listing["candidates"]}
    assert {"optimized", "xla", "litert_fp32", "litert_fp16", "litert_dynamic_int8",
            "litert_full_int8"} <= set(rows)
    chosen = listing["chosen"]
    measured = [r for r in rows.values() if r["verdict"] != "skipped"]
    passing = [r for r in measured if r["verdict"] in ("chosen", "passed")]
    assert rows[chosen["label"]]["verdict"] == "chosen"
    assert_chosen_is_the_fastest_or_a_more_precise_tie(rows, chosen["label"])
    assert all(r["accuracy_drop"] <= 0.005 for r in passing)
    assert f"chosen       {chosen['label']}" in done.stdout
    # the column says what it holds, and the input's figure and the budget are printed
    header = next(line for line in done.stdout.splitlines() if line.startswith("candidate "))
    assert "accuracy (top1)" in header and header.endswith("why not")
    input_accuracy = next(iter(rows.values()))["baseline_accuracy"]
    assert (f"accuracy     input top1 {input_accuracy:.4f} on the eval data; budget a drop of "
            f"at most 0.005") in done.stdout
    if chosen["format"] == "tflite":  # LiteRT wins on this small model; the file loads as one
        assert sorted(p.name for p in dst.iterdir()) == [
            "candidates.json", "model.tflite", "model.tflite.json"]
        assert chosen["path"] == str(dst / "model.tflite")
        model = dst / "model.tflite"
    else:
        assert (dst / "saved_model.pb").is_file()
        model = dst
    data = load_labelled_data(digits.eval_data)
    accuracy = top1_accuracy(load_runner(model), data.x, data.y)
    assert accuracy >= digits.test_accuracy - 0.005
    assert not list(tmp_path.glob(".out.candidates-*"))  # the scratch directory is gone


def test_onnx_and_openvino_allowed_write_the_chosen_models_files_and_sidecar(digits, tmp_path):
    """On a model this small both runtimes call it many times faster than TensorFlow does."""
    dst = tmp_path / "out"
    done = run_tfopt("optimize", digits.saved_model, dst, "--targets", "onnx,openvino",
                     "--eval-data", digits.eval_data, "--seconds", "2", timeout=600)
    assert done.returncode == 0, done.stderr
    listing = json.loads((dst / "candidates.json").read_text())
    rows = {r["label"]: r for r in listing["candidates"]}
    assert {"onnx_fp32", "onnx_optimized", "onnx_dynamic_int8", "onnx_static_int8",
            "openvino_fp32", "openvino_int8"} <= set(rows)
    chosen = listing["chosen"]
    files = {"onnx": ["model.onnx", "model.onnx.json"],
             "openvino": ["model.bin", "model.xml", "model.xml.json"]}[chosen["format"]]
    assert sorted(p.name for p in dst.iterdir()) == sorted(["candidates.json", *files])
    assert chosen["path"] == str(dst / files[-1].removesuffix(".json"))
    data = load_labelled_data(digits.eval_data)
    accuracy = top1_accuracy(load_runner(chosen["path"]), data.x, data.y)
    assert accuracy >= digits.test_accuracy - 0.005


def test_a_calibration_file_of_inputs_only_calibrates_full_int8_and_says_data(digits,
                                                                            tmp_path):
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=load_labelled_data(digits.eval_data).x[:60])  # no labels
    dst = tmp_path / "out"
    done = run_tfopt("optimize", digits.saved_model, dst, "--targets", "litert",
                     "--calibration-data", inputs, "--accuracy-budget", "1", "--seconds", "1",
                     timeout=600)
    assert done.returncode == 0, done.stderr
    rows = {r["label"]: r for r in json.loads((dst / "candidates.json").read_text())[
        "candidates"]}
    assert {label: r["calibration"] for label, r in rows.items()} == {
        "litert_fp32": None, "litert_fp16": None, "litert_dynamic_int8": None,
        "litert_full_int8": "data"}
    assert any(line.startswith("litert_full_int8") and " data " in line
               for line in done.stdout.splitlines())


def test_a_calibration_file_that_does_not_fit_is_one_line_before_any_work(digits, tmp_path):
    inputs = tmp_path / "labels.npz"
    np.savez(inputs, y=np.zeros(10))
    done = run_tfopt("optimize", digits.saved_model, tmp_path / "x", "--targets", "litert",
                     "--calibration-data", inputs)
    assert_clean_failure(done, 2, "calibration data needs 'x' or one array per input key "
                                  "(image); found y")
    assert not (tmp_path / "x").exists()


def test_labels_that_do_not_fit_the_models_output_are_a_one_line_error_before_any_work(
        digits, tmp_path):
    eval_data = load_labelled_data(digits.eval_data)
    per_position = tmp_path / "per_position.npz"
    np.savez(per_position, x=eval_data.x, y=np.stack([eval_data.y] * 3, axis=1))
    done = run_tfopt("optimize", digits.saved_model, tmp_path / "x", "--targets", "savedmodel",
                     "--eval-data", per_position)
    assert_clean_failure(done, 2, f"{per_position}: the labels (y of shape "
                                  f"({len(eval_data)}, 3)) do not fit the model's output",
                         "for metric top1: it scores 1 label(s) per row, y has 3")
    assert not (tmp_path / "x").exists()


def test_when_no_candidate_passes_nothing_is_written_and_the_exit_code_is_3(digits, tmp_path):
    dst = tmp_path / "never"
    done = run_tfopt("optimize", digits.saved_model, dst, "--targets", "savedmodel",
                     "--min-speedup", "1000", "--seconds", "1", "--json", timeout=600)
    assert done.returncode == 3, done.stderr
    assert not dst.exists()
    listing = json.loads((tmp_path / "never.candidates.json").read_text())
    assert listing["chosen"] is None
    assert all(r["verdict"] in ("rejected", "skipped") for r in listing["candidates"])
    # --json: one document on stdout, with what the text says (the rows, why not, the budget)
    document = json.loads(done.stdout)
    assert document["chosen"] is None and document["written"] is None
    assert document["candidates"] == listing["candidates"]
    assert all(r["reasons"] for r in document["candidates"])
    assert document["accuracy_kind"] == "top1_agreement_with_input"  # no eval data
    assert document["input_accuracy"] == 1.0 and document["accuracy_budget"] == 0.01
    assert {"optimize", "candidates", "benchmark+evaluate", "total"} <= set(document["costs"])


def test_an_unknown_target_is_a_one_line_error_before_any_work(digits, tmp_path):
    done = run_tfopt("optimize", digits.saved_model, tmp_path / "x", "--targets", "tensorrt")
    assert_clean_failure(done, 2, "unknown target 'tensorrt'")
    assert not (tmp_path / "x").exists()
