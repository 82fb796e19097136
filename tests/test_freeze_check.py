"""Freeze-and-check, the one function ``tfopt freeze`` and the pipeline's freeze step call
(tfopt.optimizer.verify.freeze_check): the frozen graph is checked against its source within the
tolerance, and a source answering NaN is refused, by either door."""

import pytest

from tfopt.components.cli import main
from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.verify.freeze_check import freeze_and_check
from tfopt.optimizer.verify.tolerance import Tolerance


def test_a_frozen_model_is_checked_against_its_source_within_the_default_tolerance(model_dir):
    stages = []

    def around(stage):
        stages.append(stage)
        from contextlib import nullcontext
        return nullcontext()

    checked = freeze_and_check(model_dir("keras_cnn"), around=around)
    assert stages == ["freeze", "check"]
    assert checked.tolerance == Tolerance()
    assert checked.report.max_abs_diff <= Tolerance().atol
    assert not any(n.op == "VarHandleOp" for n in checked.frozen.graph_def.node)


def test_a_source_answering_nan_is_refused_before_anything_is_written(model_dir):
    with pytest.raises(InvalidInputsError, match="outputs hold .* NaN values on inputs "
                                                 "generated from its signature"):
        freeze_and_check(model_dir("nan_classifier"), name="nan-model")


def test_tfopt_freeze_refuses_a_source_answering_nan_in_one_line(model_dir, tmp_path, capsys):
    assert main(["freeze", str(model_dir("nan_classifier")), str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
    assert "cannot be optimized against them" in capsys.readouterr().err
