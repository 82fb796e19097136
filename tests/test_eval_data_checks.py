"""Evaluation data is checked where it is read, before any work: at least one row, ``x`` of the
input's dtype and shape and finite, labels finite numbers, and for top-1 class ids inside the
output's classes. Each refusal is exit 2 and one line, through ``tfopt optimize --targets
--eval-data`` and through the pipeline's freeze step (``tfopt step freeze``).

Before, labels of NaN, strings, fractions or out of range were taken (every model scored 0 and
the accuracy check passed, measuring nothing), and string ``x``, the wrong width or no rows
failed as "internal error" (exit 1).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_testing import assert_clean_failure, run_tfopt

from tfopt.components.cli import main

ROWS = 6
IMAGES = np.random.default_rng(0).random((ROWS, 8, 8, 1), np.float32)
CLASSES = np.arange(ROWS, dtype=np.int64) % 10

# name -> (x, y, what the one line says, after the file's name)
BAD = {
    "nan_labels": (IMAGES, np.full(ROWS, np.nan), "y holds NaN or Inf (row 0)"),
    "string_labels": (IMAGES, np.array(["cat"] * ROWS),
                      "y holds <U3 values, not numbers; metric top1 needs numeric labels"),
    "fraction_labels": (IMAGES, CLASSES + 0.5,
                        "y holds 0.5 (row 0); metric top1 needs class ids, whole numbers"),
    "negative_labels": (IMAGES, CLASSES - 1, "y holds -1 (row 0); metric top1 needs class ids"),
    "labels_out_of_range": (IMAGES, CLASSES + 7,
                            "y holds class id 12 (row 3), outside the model's output output_0"),
    "no_rows": (IMAGES[:0], CLASSES[:0], "no rows: evaluation data needs at least one example"),
    "wrong_width": (IMAGES[:, :, :4], CLASSES,
                    "x has rows of shape (8, 4, 1), but the model's input is image"),
    "string_x": (np.array(["an image"] * ROWS), CLASSES,
                 "x holds strings (<U8), but the model's input is image: float32"),
    "nan_x": (np.where(IMAGES > 0.5, np.nan, IMAGES), CLASSES, "x holds NaN or Inf (row 0)"),
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_eval_data")
    files = {}
    for name, (x, y, _) in BAD.items():
        files[name] = root / f"{name}.npz"
        np.savez(files[name], x=x, y=y)
    return files


@pytest.mark.parametrize("case", sorted(BAD))
def test_tfopt_optimize_refuses_bad_evaluation_data_in_one_line(case, bad_files, model_dir,
                                                                tmp_path):
    done = run_tfopt("optimize", model_dir("softmax_classifier"), tmp_path / "out",
                     "--targets", "savedmodel", "--eval-data", bad_files[case])

    assert_clean_failure(done, 2, f"{bad_files[case]}: {BAD[case][2]}")
    assert not (tmp_path / "out").exists()


def _freeze(tmp_path, capsys, source, sections: str) -> tuple[int, str, object]:
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"source: {source}\nworkdir: {tmp_path / 'work'}\n{sections}")
    assert main(["step", "pull", "--config", str(config)]) == 0
    pulled = json.loads(capsys.readouterr().out)
    out_file = tmp_path / "freeze.json"
    code = main(["step", "freeze", "--config", str(config), "--inputs",
                 json.dumps({"pull": pulled}), "--output", str(out_file)])
    return code, capsys.readouterr().err, out_file


@pytest.mark.parametrize("case", ["string_labels", "labels_out_of_range", "no_rows",
                                  "wrong_width", "string_x"])
def test_the_freeze_step_refuses_bad_evaluation_data_in_one_line(case, bad_files, model_dir,
                                                                 tmp_path, capsys):
    code, err, out_file = _freeze(tmp_path, capsys, model_dir("softmax_classifier"),
                                  f"evaluation: {{data: {bad_files[case]}}}\n")

    assert code == 2, err
    assert f"{bad_files[case]}: {BAD[case][2]}" in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1
    assert not out_file.exists()


def test_an_error_metric_needs_numeric_labels(bad_files, model_dir, tmp_path, capsys):
    code, err, _ = _freeze(tmp_path, capsys, model_dir("softmax_classifier"),
                           f"evaluation: {{data: {bad_files['string_labels']}, metric: mse}}\n")

    assert code == 2
    assert "y holds <U3 values, not numbers; metric mse needs numeric labels" in err


def test_the_freeze_step_refuses_a_source_answering_nan_on_the_evaluation_data(
        model_dir, tmp_path, capsys):
    data = tmp_path / "eval.npz"
    np.savez(data, x=IMAGES, y=CLASSES)
    source = model_dir("nan_classifier")

    code, err, out_file = _freeze(tmp_path, capsys, source, f"evaluation: {{data: {data}}}\n")

    assert code == 2, err
    assert f"{source}: its outputs hold 60 NaN values on the evaluation data {data}" in err
    assert not out_file.exists()


def test_the_freeze_step_refuses_a_source_answering_nan_on_generated_inputs(
        model_dir, tmp_path, capsys):
    source = model_dir("nan_classifier")

    code, err, _ = _freeze(tmp_path, capsys, source, "")

    assert code == 2, err
    assert f"{source}: its outputs hold " in err
    assert "NaN values on inputs generated from its signature" in err
