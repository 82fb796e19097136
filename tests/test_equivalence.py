"""compare() reports differences that exist and none that don't."""

import numpy as np
import pytest
from graph_testing import build_graph, tf

from tfopt.optimizer.errors import EquivalenceError
from tfopt.optimizer.graph.consts import values_from_const
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.verify.equivalence import compare


def _linear_model(weights):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.identity(tf.matmul(x, tf.constant(weights, name="w")), name="logits")
    signature = SignatureInfo(
        name="serving_default",
        inputs=(TensorSpecInfo("x", "x:0", "float32", (None, 3)),),
        outputs=(TensorSpecInfo("logits", "logits:0", "float32", (None, 4)),))
    return FrozenModel(build_graph(body), signature)


WEIGHTS = np.arange(12, dtype=np.float32).reshape(3, 4) / 7.0


def test_identical_models_report_zero_difference():
    report = compare(_linear_model(WEIGHTS), _linear_model(WEIGHTS.copy()))
    assert report.max_abs_diff == 0 and report.max_rel_diff == 0
    assert report.top1_agreement == 1.0
    assert report.within(atol=0)


def test_a_perturbed_weight_shows_up_as_a_difference():
    damaged = WEIGHTS.copy()
    damaged[1, 2] += 0.5
    report = compare(_linear_model(WEIGHTS), _linear_model(damaged), batches=2, batch_size=8)
    assert report.max_abs_diff > 0.01
    assert not report.within(atol=1e-5)
    assert report.batches == 2


def test_swapped_classes_lower_top1_agreement():
    swapped = WEIGHTS[:, ::-1].copy()
    report = compare(_linear_model(WEIGHTS), _linear_model(swapped), batch_size=16)
    assert report.top1_agreement < 0.5


def test_supplied_inputs_are_used_as_given():
    x = {"x": np.ones((1, 3), np.float32)}
    report = compare(_linear_model(WEIGHTS), _linear_model(WEIGHTS * 2), inputs=x)
    expected = np.abs(np.ones((1, 3)) @ WEIGHTS).max()
    assert report.max_abs_diff == pytest.approx(expected, rel=1e-6)


def test_models_with_different_signatures_are_not_compared():
    other = _linear_model(WEIGHTS)
    renamed = FrozenModel(other.graph_def, SignatureInfo(
        "serving_default", other.signature.inputs,
        (TensorSpecInfo("scores", "logits:0", "float32", (None, 4)),)))
    with pytest.raises(EquivalenceError, match="signatures differ"):
        compare(other, renamed)


def test_weights_helper_reads_consts():
    model = _linear_model(WEIGHTS)
    w = next(n for n in model.graph_def.node if n.name == "w")
    np.testing.assert_array_equal(values_from_const(w), WEIGHTS)
