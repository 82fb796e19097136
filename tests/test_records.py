"""Records to JSON-ready dicts and back through pydantic (optimizer/files/records.py)."""

import json
from dataclasses import dataclass, field

import pytest
from pydantic import ValidationError

from optimizer.files.records import record_from_dict, record_to_dict


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
