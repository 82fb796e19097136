"""Choose among the candidates the gate promoted, when some are indistinguishable in speed.

The fastest promoted candidate is served unless another promoted one's speedup interval overlaps
the fastest one's: the benchmark cannot tell them apart, so the one that keeps more of the
model's numeric precision wins (float32, then reduced floats, then int8). A fp16 LiteRT model
tied with its fp32 twin was chosen by a hair's point estimate, and timed alone it was slower.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from optimizer.benchmark.stats import RatioInterval

if TYPE_CHECKING:
    from optimizer.gate.verdict import Verdict

# How much numeric precision a candidate gives up, by its label's last part: the labels are
# ``{target}_{variant}`` (``litert_fp16``, ``onnx_static_int8``) or a SavedModel variant.
_REDUCED_FLOAT = ("fp16", "bf16")
_INTEGER = "int8"


def precision_rank(label: str) -> int:
    """0: float32 (as the input computes); 1: reduced floats (fp16, bf16); 2: int8."""
    if label.endswith(_INTEGER):
        return 2
    return 1 if label.endswith(_REDUCED_FLOAT) else 0


def _overlaps(a: RatioInterval, b: RatioInterval) -> bool:
    return a.low <= b.high and b.low <= a.high


def choose_among_promoted(promoted: Sequence[Verdict],
                          intervals: dict[str, dict[int, RatioInterval]],
                          batch: int) -> str | None:
    """The promoted candidate to serve: the fastest, or among those whose interval at ``batch``
    overlaps the fastest one's, the most precise (:func:`precision_rank`), fastest first among
    equals. None when nothing was promoted."""
    if not promoted:
        return None
    fastest = max(promoted, key=lambda v: v.speedup or 0.0)
    reference = intervals.get(fastest.candidate, {}).get(batch)
    if reference is None:
        return fastest.candidate
    tied = [v for v in promoted
            if (interval := intervals.get(v.candidate, {}).get(batch)) is not None
            and _overlaps(interval, reference)]
    return min(tied, key=lambda v: (precision_rank(v.candidate), -(v.speedup or 0.0))
               ).candidate
