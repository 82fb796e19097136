"""litert_mixed_int8 on a convnet trained here that full int8 breaks for a reason one can name
(tests/precision_models.py, ``digits_separable``: the digit images standardized per pixel inside
the model; pixels never inked in training divide by Keras' epsilon, so the normalization's
scale constant spans 0.2 to 1e7 and one per-tensor int8 scale rounds every real pixel's factor
to 0). The measured sensitivity names the normalization, and the search keeps it, not the
convolutions, in float. One small convnet, one greedy search."""

from __future__ import annotations

import pytest
from precision_models import searched_candidate, train_model

from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.verify.evaluation import load_labelled_data, top1_accuracy

BUDGET = 0.01


pytestmark = pytest.mark.slow  # ~30 s alone, 2.5 min on the loaded 2 cores


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    model = train_model("digits_separable", tmp_path_factory.mktemp("digits"))
    signature = get_signature(model.saved_model, "serving_default")
    eval_data = load_labelled_data(model.eval_data, signature, "top1")
    outcome = searched_candidate(model, tmp_path_factory.mktemp("search"), "greedy", BUDGET,
                                 target="litert")
    return model, eval_data, outcome


def normalization(table) -> str:
    """The normalization's op that int8 breaks (LiteRT names its subtraction and its division
    apart): the one whose quantizing alone costs most."""
    return max((n for n in table.layers if "normalize" in n), key=table.quantized_alone.get)


def test_full_int8_breaks_the_budget_on_the_per_pixel_normalization(searched):
    _, _, outcome = searched
    table = outcome.table
    assert outcome.uniform_int8_error > 0.5  # it answers one class
    norm = normalization(table)
    assert table.quantized_alone[norm] > BUDGET
    assert table.float_alone[norm] <= BUDGET
    # no convolution alone explains it
    assert all(table.quantized_alone[n] <= BUDGET for n in table.layers if n != norm)


def test_the_convolutions_stay_int8_and_the_candidate_keeps_the_accuracy(searched):
    model, eval_data, outcome = searched
    candidate = outcome.candidate
    assert candidate is not None and candidate.label == "litert_mixed_int8", outcome.reason
    assert "truediv" in normalization(outcome.table)  # the division by the per-pixel scale
    assert candidate.float_layers[0] == normalization(outcome.table)
    assert len(candidate.float_layers) <= 3 < len(outcome.table.layers)
    float_accuracy = top1_accuracy(load_runner(model.saved_model), eval_data.x, eval_data.y)
    assert top1_accuracy(load_runner(candidate.path), eval_data.x,
                         eval_data.y) >= float_accuracy - BUDGET
