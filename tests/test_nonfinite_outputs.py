"""NaN never equals NaN, in any check: equivalence, fidelity's top-1 agreement, the top-1
metric; an input model whose outputs are not finite is refused before any work (exit 2).

Real SavedModels from tests/model_zoo.py with the digits model's signature: one answering NaN
for every image, one answering finite scores.
"""

from __future__ import annotations

import numpy as np
import pytest
from cli_testing import assert_clean_failure, run_tfopt

from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY
from tfopt.optimizer.verify.equivalence import compare
from tfopt.optimizer.verify.evaluation import LabelledData, refuse_nonfinite_input_model, top1
from tfopt.optimizer.verify.tolerance import Tolerance

IMAGES = [{"image": np.random.default_rng(seed).random((4, 8, 8, 1), np.float32)}
          for seed in range(3)]


def test_a_model_answering_nan_is_not_equivalent_to_itself(model_dir):
    nan = model_dir("nan_classifier")

    report = compare(nan, nan, IMAGES)

    assert report.max_abs_diff == np.inf
    assert report.top1_agreement == 0.0  # argmax of NaN is 0 on both sides: no agreement
    assert report.original_nan_values == 3 * 4 * 10
    assert not report.within(atol=1e-5)


def test_a_candidate_answering_nan_where_the_source_is_finite_is_counted_and_named(model_dir):
    report = compare(model_dir("softmax_classifier"), model_dir("nan_classifier"), IMAGES)

    assert (report.nan_values, report.inf_values, report.original_nan_values) == (120, 0, 0)
    assert report.top1_agreement == 0.0
    assert not report.within(atol=None)  # even with no bound on the difference
    assert Tolerance(atol=1.0).violations(report)[0] == (
        "120 NaN values where the source's outputs are finite")
    assert "120 NaN values where the original's are finite" in report.summary()


def test_the_top1_metric_counts_a_row_of_nan_as_wrong():
    scores = np.array([[np.nan, 0.1], [0.9, 0.1], [0.2, np.nan]], np.float32)

    assert top1(scores, np.array([0, 0, 1])) == pytest.approx(1 / 3)


def test_an_input_model_answering_nan_on_evaluation_data_is_refused(model_dir):
    data = LabelledData(IMAGES[0]["image"], np.zeros(4, np.int64), "eval.npz")

    with pytest.raises(InvalidInputsError, match=r"^model: its outputs hold 40 NaN values on "
                                                 r"the evaluation data eval\.npz"):
        refuse_nonfinite_input_model(model_dir("nan_classifier"), data, "serving_default",
                                     DEFAULT_POLICY, name="model")
    refuse_nonfinite_input_model(model_dir("softmax_classifier"), data, "serving_default",
                                 DEFAULT_POLICY)  # finite: nothing to say


def test_tfopt_optimize_refuses_a_source_answering_nan_on_generated_inputs(model_dir, tmp_path):
    nan = model_dir("nan_classifier")

    done = run_tfopt("optimize", nan, tmp_path / "out", "--transforms", "fold_constants")

    assert_clean_failure(done, 2, f"{nan}: its outputs hold ", "NaN values on inputs generated "
                                  "from its signature")
    assert not (tmp_path / "out").exists()
