"""Recipe steps built into transforms: each name and parameter checked before any runs.

As in GTT, every transform accepts ``ignore_errors``: with ``true`` a failing step is logged and
skipped, leaving the graph as it was (:class:`IgnoringErrors`, for a transform that does not
declare the parameter itself).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable

from tfopt.optimizer.optimize.gtt_syntax import TransformSpec
from tfopt.optimizer.transforms.base import Param, Transform, TransformConfigError

log = logging.getLogger(__name__)

IGNORE_ERRORS = Param("ignore_errors", bool, False,
                      "GTT: log a failure of this transform and skip it instead of stopping")


def _did_you_mean(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


class IgnoringErrors(Transform):
    """GTT's ``ignore_errors=true`` for a transform that does not declare it: a failure is
    logged and the step is skipped, the graph passing through unchanged."""

    def __init__(self, inner: Transform):
        self.inner = inner
        self.name = inner.name
        self.values = dict(inner.values, ignore_errors=True)

    def describe(self) -> str:
        inner = self.inner.describe()
        if inner.endswith(")"):
            return f"{inner[:-1]}, ignore_errors=true)"
        return f"{inner}(ignore_errors=true)"

    def __call__(self, graph_def, context):
        try:
            return self.inner(graph_def, context)
        except Exception as exc:  # noqa: BLE001 - what ignore_errors=true asks for
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            log.warning("%s failed and is skipped (ignore_errors=true): %s: %s",
                        self.inner.describe(), type(exc).__name__, reason)
            return graph_def


def build_transform(spec: TransformSpec) -> Transform:
    from tfopt.optimizer.transforms import registry

    valid = registry.transform_names()
    if spec.name not in valid:
        raise TransformConfigError(f"unknown transform '{spec.name}'"
                                   f"{_did_you_mean(spec.name, valid)}; valid: "
                                   f"{', '.join(valid)}")
    cls = registry.transform_class(spec.name)
    declared = [p.name for p in cls.params]
    accepted = declared + ([IGNORE_ERRORS.name] if IGNORE_ERRORS.name not in declared else [])
    unknown = [key for key in spec.params if key not in accepted]
    if unknown:
        raise TransformConfigError(
            f"{spec.name}: unknown parameter '{unknown[0]}'"
            f"{_did_you_mean(unknown[0], accepted)}; valid: {', '.join(accepted)}")
    values = dict(spec.params)
    ignore_errors = False
    if IGNORE_ERRORS.name not in declared and IGNORE_ERRORS.name in values:
        ignore_errors = IGNORE_ERRORS.parse(spec.name, list(values.pop(IGNORE_ERRORS.name)))
    transform = cls(**values)
    return IgnoringErrors(transform) if ignore_errors else transform


def build_transforms(specs: Iterable[TransformSpec]) -> list[Transform]:
    """Specs -> transforms, failing on the first unknown name or parameter before any runs."""
    return [build_transform(spec) for spec in specs]
