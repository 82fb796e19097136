"""Plain-data records to JSON-ready dicts and back, through pydantic.

The library's records are standard dataclasses: they are built positionally in many places and
read like any Python object. Pydantic (already the config's validator) serializes and validates
standard dataclasses through a ``TypeAdapter``, so a record needs no hand-written
``to_dict``/``from_dict``: its field types say how each value is written and read back (tuples,
nested records, optional fields, enums). A record whose stored form differs from its fields
(an older artifact's keys, a derived value) says so in its own ``from_dict``, on top of these.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from pydantic import TypeAdapter

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
