"""What "the same outputs" means for an optimized model: bounds on an equivalence report.

An absolute bound is always checked; a relative bound and a minimum top-1 agreement are checked
only when given. The default ``atol`` of 1e-4 leaves room for the float32 reassociation that
folding and fusing cause (a folded batch norm multiplies weights before, not after, the
convolution) while still catching a changed computation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import Field

from tfopt.optimizer.errors import TfoptError, shown
from tfopt.optimizer.records import Settings
from tfopt.optimizer.verify.finite import nonfinite_text

if TYPE_CHECKING:
    from tfopt.optimizer.verify.equivalence import EquivalenceReport


class ToleranceError(TfoptError):
    """A tolerance given in a file or on the command line is not a usable bound."""


class Tolerance(Settings):
    """Bounds on an equivalence report; the pipeline config's ``optimize.atol``, ``optimize.rtol``
    and ``optimize.min_top1`` are these fields."""

    error = ToleranceError
    subject = "tolerance"

    atol: float = Field(1e-4, ge=0, allow_inf_nan=False,
                        description="equivalence bound for every rewrite")
    rtol: float | None = Field(None, ge=0, allow_inf_nan=False,
                               description="relative bound (to the output's scale)")
    min_top1: float | None = Field(None, ge=0, le=1,
                                   description="least top-1 agreement with the source")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "tolerance") -> Tolerance:
        """``{atol: ..., rtol: ..., min_top1: ...}`` as written in a recipe file."""
        if not isinstance(data, Mapping):
            raise ToleranceError(f"{where} must be a mapping of atol/rtol/min_top1, "
                                 f"got {type(data).__name__}")
        known = tuple(cls.model_fields)
        unknown = [shown(k) for k in data if k not in known]
        if unknown:
            raise ToleranceError(f"{where}: unknown key(s) {', '.join(unknown)}; "
                                 f"valid: {', '.join(known)}")
        values = {}
        for key, value in data.items():
            # PyYAML reads ``1e-4`` (no dot) as a string, so numbers may arrive as text.
            try:
                if isinstance(value, bool):
                    raise TypeError(value)
                values[key] = None if value is None else float(value)
            except (TypeError, ValueError):
                raise ToleranceError(f"{where}: {key} must be a number, got {value!r}") from None
        return cls(**values)

    def accepts(self, report: EquivalenceReport) -> bool:
        return report.within(atol=self.atol, rtol=self.rtol, min_top1=self.min_top1)

    def violations(self, report: EquivalenceReport) -> list[str]:
        """Each bound the report breaks, with both figures, e.g. ``max abs diff 0.3 > atol 1e-4``."""
        broken = []
        if report.nan_values or report.inf_values:
            broken.append(f"{nonfinite_text(report.nan_values, report.inf_values)} where the "
                          f"source's outputs are finite")
        if report.max_abs_diff > self.atol:
            broken.append(f"max abs diff {report.max_abs_diff:.3g} > atol {self.atol:g}")
        if self.rtol is not None and report.max_rel_diff > self.rtol:
            broken.append(f"max rel diff {report.max_rel_diff:.3g} > rtol {self.rtol:g}")
        if (self.min_top1 is not None and report.top1_agreement is not None
                and report.top1_agreement < self.min_top1):
            broken.append(f"top-1 agreement {report.top1_agreement:.4f} < min_top1 "
                          f"{self.min_top1:g}")
        return broken

    def describe(self) -> str:
        parts = [f"atol {self.atol:g}"]
        if self.rtol is not None:
            parts.append(f"rtol {self.rtol:g}")
        if self.min_top1 is not None:
            parts.append(f"min top-1 {self.min_top1:g}")
        return ", ".join(parts)

