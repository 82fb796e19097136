"""Records to JSON-ready dicts and back through pydantic, and the settings the library owns
(optimizer/records.py)."""

import json
from dataclasses import dataclass, field
from typing import Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.records import (
    JsonRecord,
    Settings,
    default_of,
    field_of,
    in_order,
    record_error_line,
    record_from_dict,
    record_to_dict,
)


@dataclass(frozen=True)
class _Inner:
    name: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class _Outer:
    inner: _Inner
    seconds: float
    note: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


def test_a_nested_record_goes_through_json_and_comes_back_equal():
    record = _Outer(_Inner("x", (1, 28, 28)), 0.5, tags={"format": "tflite"})
    data = json.loads(json.dumps(record_to_dict(record)))
    assert data["inner"]["shape"] == [1, 28, 28]
    assert record_from_dict(_Outer, data) == record


def test_a_missing_field_is_refused():
    with pytest.raises(ValidationError, match="seconds"):
        record_from_dict(_Outer, {"inner": {"name": "x", "shape": [1]}})


@dataclass(frozen=True)
class _Timed(JsonRecord):
    seconds: float
    note: str | None = None


def test_a_json_record_reads_back_what_it_wrote_and_ignores_keys_it_does_not_hold():
    record = _Timed(0.5)
    assert record.to_dict() == {"seconds": 0.5, "note": None}
    assert _Timed.from_dict({"seconds": 0.5, "derived_ms": 500.0}) == record


def test_an_artifacts_key_order_is_kept_where_it_differs_from_the_fields():
    assert list(in_order({"b": 1, "a": 2, "c": 3}, ("a", "b", "z"))) == ["a", "b"]


def test_a_bad_record_is_one_line_naming_the_field():
    with pytest.raises(ValidationError) as missing:
        record_from_dict(_Outer, {"inner": {"name": "x", "shape": [1]}})
    assert record_error_line(missing.value) == "missing field 'seconds'"
    with pytest.raises(ValidationError) as wrong:
        record_from_dict(_Outer, {"inner": {"name": "x", "shape": ["wide"]}, "seconds": 1})
    line = record_error_line(wrong.value)
    assert line.startswith("'inner.shape.0': ") and "\n" not in line


class _StepError(TfoptError):
    pass


class _Step(Settings):
    error = _StepError
    subject = "step"

    size: int = Field(3, ge=1, description="how many")
    share: float = Field(0.5, ge=0, le=1, allow_inf_nan=False)
    level: float = Field(0.9, gt=0.5, lt=1)
    mode: Literal["fast", "slow"] = "fast"


@pytest.mark.parametrize("values, message", [
    ({"size": 0}, "step size must be >= 1, got 0"),
    ({"share": 2}, "step share must be a finite number between 0 and 1, got 2"),
    ({"share": float("nan")}, "step share must be a finite number between 0 and 1, got nan"),
    ({"level": 1}, "step level must be in (0.5, 1), got 1"),
    ({"mode": "warp"}, "step mode must be 'fast' or 'slow', got 'warp'"),
    ({"size": "many"}, "step size: input should be a valid integer"),
    ({"sise": 2}, "step: unknown setting 'sise'; valid: size, share, level, mode"),
])
def test_a_bad_setting_is_the_settings_own_error_in_one_line(values, message):
    with pytest.raises(_StepError) as error:
        _Step(**values)
    assert str(error.value).startswith(message), str(error.value)


def test_settings_are_frozen_and_a_changed_copy_is_checked_again():
    step = _Step(size=2)
    with pytest.raises(ValidationError):
        step.size = 5
    assert step.replaced(share=0.25) == _Step(size=2, share=0.25)
    with pytest.raises(_StepError, match="step size must be >= 1"):
        step.replaced(size=0)


def test_a_config_key_declared_with_a_settings_field_has_its_default_and_bound():
    class Section(BaseModel):
        size: int = field_of(_Step, "size")

    assert Section().size == default_of(_Step, "size") == 3
    assert Section.model_fields["size"].description == "how many"
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Section(size=0)
    assert _Step.model_fields["size"].default == 3  # the copy, not the settings' own field
