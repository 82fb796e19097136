"""The trust boundary between the operator who writes a DAG's YAML and whoever triggers a run.

Three things hand a run its model from outside: the extra of the asset event a training job
posts, the ``dag_run.conf`` of a manual or API trigger, and ``tfopt run --conf``/``--event``,
which stand for them on the command line (and carry them into Kubernetes pods). Whoever can
post an event is not the operator: by default a trigger may set only ``source`` and
``evaluation.data``, plus the keys the YAML lists in ``triggers.allow_overrides``; keys under
:data:`tfopt.components.config.pipeline_config.NEVER_FROM_A_TRIGGER` (credentials' destinations, files, the op scan,
the memory budget) never. The operator's ``--set`` is not checked here: it keeps full power.

What a trigger sends is checked for shape and size before any of it is read as config: a
mapping of known keys, dotted override keys, values that are JSON scalars or small lists and
mappings of them, strings of at most :data:`MAX_VALUE_CHARS`, at most :data:`MAX_TRIGGER_CHARS`
in all, and no YAML anchors or aliases. Anything else is a :class:`TriggerRefused` naming the
key, a :class:`~tfopt.components.config.pipeline_config.ConfigError` (exit 2), before any model work.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from tfopt.components.config.pipeline_config import (
    TRIGGER_DEFAULT_KEYS,
    ConfigError,
    TriggersConfig,
    never_from_a_trigger,
    parse_override_value,
)
from tfopt.optimizer.errors import shown

# A URI names a model: an S3 key is at most 1024 bytes, with the bucket and scheme around it.
MAX_VALUE_CHARS = 2048
MAX_TRIGGER_CHARS = 16_384  # the whole of one trigger's payload, as compact JSON
MAX_OVERRIDES = 32
MAX_DEPTH = 3  # a value, a list or mapping in it, and one more level (a recipe's arguments)
KEY_PATTERN = r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$"
MAX_KEY_CHARS = 128

# What a training job may put in the extra of the asset event that hands over its model; other
# keys are left alone (an event's extra is shared with whatever else reads the asset).
ASSET_EXTRA_KEYS = {
    "source": "the trained model: s3://bucket/prefix, a path, models:/name@alias",
    "evaluation_data": "labelled data for this model (sets evaluation.data)",
    "overrides": "dotted config keys the DAG's YAML allows (triggers.allow_overrides)",
}
# The shorthand keys of a trigger, and the config key each sets.
SHORTHAND = {"source": "source", "evaluation_data": "evaluation.data"}

# JSON schema of dag_run.conf, enforced by the DAG's Params when a run is triggered (the
# checks below hold for every trigger, whatever Airflow's checks).
PARAMS_SCHEMA = {
    "source": {"type": ["null", "string"], "minLength": 1, "maxLength": MAX_VALUE_CHARS,
               "description": "override source: s3://bucket/prefix, a path, models:/name@alias"},
    "overrides": {"type": "object",
                  "maxProperties": MAX_OVERRIDES,
                  "propertyNames": {"pattern": KEY_PATTERN, "maxLength": MAX_KEY_CHARS},
                  "additionalProperties": {"type": ["string", "number", "boolean", "array",
                                                    "null"]},
                  "description": "config keys the DAG's YAML lets a trigger set "
                                 "(triggers.allow_overrides; source and evaluation.data "
                                 "always), e.g. {\"evaluation.data\": \"s3://.../eval.npz\"}"},
}


class TriggerRefused(ConfigError):
    """A trigger's extra or conf sets what the DAG's YAML does not let a trigger set, or is not
    the shape a trigger's payload has."""


@dataclass(frozen=True)
class Trigger:
    """One trigger's payload: ``where`` names it in errors (``"dag_run.conf"``); ``strict``
    refuses unknown top-level keys (a conf is ours alone; an event's extra is shared)."""

    where: str
    payload: Any
    strict: bool = True


def event(extra: Any, where: str = "asset event extra") -> Trigger:
    return Trigger(where, extra, strict=False)


def conf(payload: Any, where: str = "dag_run.conf") -> Trigger:
    return Trigger(where, payload, strict=True)


def trigger_overrides(triggers: list[Trigger], policy: TriggersConfig) -> dict[str, Any]:
    """The dotted overrides the ``triggers`` set, in order (a later one wins key by key), each
    checked against ``policy``, the operator's ``triggers`` section."""
    allowed = (*TRIGGER_DEFAULT_KEYS, *policy.allow_overrides)
    overrides: dict[str, Any] = {}
    for trigger in triggers:
        for key, value in _dotted_items(trigger).items():
            _check_allowed(trigger.where, key, allowed)
            overrides[key] = value
    return overrides


def _dotted_items(trigger: Trigger) -> dict[str, Any]:
    where, payload = trigger.where, trigger.payload
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise TriggerRefused(f"{where}: must be a JSON object, got {type(payload).__name__}")
    known = ("overrides", *SHORTHAND)
    if trigger.strict:
        for key in payload:
            if key not in known:
                raise TriggerRefused(f"{where}: unknown key {shown(key)!r}; a trigger sets "
                                     f"{', '.join(known)}")
    size = len(json.dumps({k: payload.get(k) for k in known}, separators=(",", ":"),
                          default=str))
    if size > MAX_TRIGGER_CHARS:
        raise TriggerRefused(f"{where}: {size} characters of source and overrides, more than "
                             f"the {MAX_TRIGGER_CHARS} a trigger may send")
    items: dict[str, Any] = {}
    overrides = payload.get("overrides")
    if overrides is not None:
        if not isinstance(overrides, dict):
            raise TriggerRefused(f'{where}: "overrides" must be a JSON object of dotted keys, '
                                 f"got {type(overrides).__name__}")
        if len(overrides) > MAX_OVERRIDES:
            raise TriggerRefused(f"{where}: {len(overrides)} overrides, more than the "
                                 f"{MAX_OVERRIDES} a trigger may set")
        for key, value in overrides.items():
            _check_key(where, key)
            items[key] = _checked_value(f"{where}: {key!r}", value)
    for short, dotted in SHORTHAND.items():
        value = payload.get(short)
        if value is None or value == "":
            continue  # not given (a Param's default, or a job that left it out)
        if not isinstance(value, str):
            raise TriggerRefused(f"{where}: {short!r} must be a string, got "
                                 f"{type(value).__name__}")
        items[dotted] = _checked_value(f"{where}: {short!r}", value)
    return items


def _check_key(where: str, key: Any) -> None:
    if not isinstance(key, str) or len(key) > MAX_KEY_CHARS or not re.match(KEY_PATTERN, key):
        shown_key = shown(key)[:MAX_KEY_CHARS] if isinstance(key, str) else key
        raise TriggerRefused(f"{where}: {shown_key!r} is not a dotted config key "
                             f"(e.g. evaluation.data)")


def _check_allowed(where: str, key: str, allowed: tuple[str, ...]) -> None:
    reason = never_from_a_trigger(key)
    if reason:
        raise TriggerRefused(f"{where}: {key!r} can never come from a trigger ({reason}); "
                             f"the operator sets it in the DAG's YAML or with --set")
    if not any(key == grant or key.startswith(grant + ".") for grant in allowed):
        raise TriggerRefused(f"{where}: {key!r} may not come from a trigger; a trigger may set "
                             f"{', '.join(allowed)} (the DAG's YAML allows more with "
                             f"triggers.allow_overrides)")


def _checked_value(what: str, value: Any, depth: int = 0) -> Any:
    """``value`` if it is JSON a trigger may send: finite numbers, short strings with no YAML
    anchors or aliases, and lists and mappings of them nested at most :data:`MAX_DEPTH`."""
    if depth > MAX_DEPTH:
        raise TriggerRefused(f"{what}: nested more than {MAX_DEPTH} levels deep")
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TriggerRefused(f"{what}: {value} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS:
            raise TriggerRefused(f"{what}: a value of {len(value)} characters, more than the "
                                 f"{MAX_VALUE_CHARS} a trigger may send")
        parse_override_value(value, what)  # as the override will be read: refuses aliases
        return value
    if isinstance(value, list):
        return [_checked_value(what, item, depth + 1) for item in value]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TriggerRefused(f"{what}: a mapping key must be a string")
        return {key: _checked_value(what, item, depth + 1) for key, item in value.items()}
    raise TriggerRefused(f"{what}: {type(value).__name__} is not a JSON value")
