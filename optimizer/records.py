"""Plain-data records to JSON-ready dicts and back, through pydantic.

The library's records are standard dataclasses: they are built positionally in many places and
read like any Python object. Pydantic (already the config's validator) serializes and validates
standard dataclasses through a ``TypeAdapter``, so a record needs no hand-written
``to_dict``/``from_dict``: its field types say how each value is written and read back (tuples,
nested records, optional fields, enums). A record whose stored form differs from its fields
(an older artifact's keys, a derived value) says so in its own ``from_dict``, on top of these.

Settings (:class:`Settings`) are pydantic models instead: they validate what a user gives, and
the config's sections declare their keys with the same fields.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any, ClassVar, Self, TypeVar

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic.types import AllowInfNan

Record = TypeVar("Record")


@cache
def _adapter(cls: type) -> TypeAdapter:
    # One adapter per record type: building one compiles the type's validator and serializer.
    return TypeAdapter(cls)


def record_to_dict(record: Any) -> dict:
    """``record`` as JSON-ready data: nested records become dicts, tuples lists."""
    return _adapter(type(record)).dump_python(record, mode="json")


def record_from_dict(cls: type[Record], data: dict) -> Record:
    """The ``cls`` record that ``data`` (as :func:`record_to_dict` wrote it) describes. Each field
    is checked and converted by its type, so lists read back from JSON become tuples again."""
    return _adapter(cls).validate_python(data)


class Settings(BaseModel):
    """Settings the library owns (search, benchmark, tolerance): each field declares its default,
    its bounds and what it means, once; the config's sections and the CLI's flags read them from
    here (:func:`field_of`, :func:`default_of`). Built by keyword and checked on creation: a bad
    value raises the subclass's ``error`` (a :class:`~tfopt.optimizer.errors.TfoptError`, so the CLI
    exits with its code) in one line naming the setting and its bound."""

    # defer_build: the validators are compiled on first use, not when the CLI, reading the
    # defaults for its help, imports these classes
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    error: ClassVar[type[Exception]] = ValueError
    subject: ClassVar[str] = "setting"  # how the error line names these settings

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise self.error(settings_error_line(exc, type(self))) from None

    def replaced(self, **changes: Any) -> Settings:
        """A copy with ``changes``, checked like a new one (``model_copy`` checks nothing)."""
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return type(self)(**{**fields, **changes})

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


def field_of(settings: type[BaseModel], name: str, **changes: Any) -> FieldInfo:
    """A copy of the field ``name`` of ``settings`` (default, bounds, description) to declare a
    config key that is that setting, so neither is written twice; ``changes`` (a different
    description, say) are applied to the copy."""
    field = copy.deepcopy(settings.model_fields[name])
    for key, value in changes.items():
        setattr(field, key, value)
    return field


def default_of(settings: type[BaseModel], name: str) -> Any:
    return settings.model_fields[name].get_default(call_default_factory=True)


_BOUNDS = {Ge: (">=", "ge"), Gt: (">", "gt"), Le: ("<=", "le"), Lt: ("<", "lt")}


def _requirement(field: FieldInfo) -> str:
    """What a number field takes, from its declared bounds: ``between 0 and 1``, ``>= 1``."""
    bounds = {op: getattr(m, attribute) for m in field.metadata
              for kind, (op, attribute) in _BOUNDS.items() if isinstance(m, kind)}
    finite = any(isinstance(m, AllowInfNan) and not m.allow_inf_nan for m in field.metadata)
    if ">=" in bounds and "<=" in bounds:
        text = f"between {bounds['>=']:g} and {bounds['<=']:g}"
    elif ">" in bounds and "<" in bounds:
        text = f"in ({bounds['>']:g}, {bounds['<']:g})"
    else:
        text = " and ".join(f"{op} {value:g}" for op, value in bounds.items())
    return f"a finite number {text}" if finite else text


def settings_error_line(exc: ValidationError, settings: type[Settings]) -> str:
    """The first problem ``exc`` lists, as one line: ``search alpha must be >= 1, got 0.5``."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    field = settings.model_fields.get(name)
    subject = settings.subject
    if field is None:
        return (f"{subject}: unknown setting {name!r}; valid: "
                f"{', '.join(settings.model_fields)}")
    label = f"{subject} {field.title or name}"
    got = f"got {error.get('input')!r}"
    if error["type"] == "literal_error":
        return f"{label} must be {error['ctx']['expected']}, {got}"
    if error["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal",
                         "finite_number") and _requirement(field):
        return f"{label} must be {_requirement(field)}, {got}"
    return f"{label}: {error['msg'][:1].lower()}{error['msg'][1:]}, {got}"


def record_error_line(exc: ValidationError) -> str:
    """The first problem ``exc`` (from :func:`record_from_dict`) lists, in one line:
    ``missing field 'baseline.label'`` or ``'ratios.fast.1.high': Input should be ...``."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    if error["type"] == "missing":
        return f"missing field {where!r}"
    return f"{where!r}: {error['msg']}"


def in_order(data: dict, keys: tuple[str, ...]) -> dict:
    """``data``'s keys in the order ``keys`` gives: an artifact's order, where it is older than
    the order of its record's fields (those with a default come last)."""
    return {key: data[key] for key in keys if key in data}


class JsonRecord:
    """For a standard dataclass: ``to_dict`` and ``from_dict`` through :func:`record_to_dict`
    and :func:`record_from_dict`. A record whose stored form differs overrides them."""

    def to_dict(self) -> dict:
        return record_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Self:
        return record_from_dict(cls, data)
