"""Choose among the candidates the gate promoted, when some are indistinguishable in speed.

The fastest promoted candidate is served unless the benchmark cannot tell another promoted one
from it: then the one that keeps more of the model's numeric precision wins (float32, then
reduced floats, then int8). A fp16 LiteRT model tied with its fp32 twin was chosen by a hair's
point estimate, and timed alone it was slower.

Two candidates timed in the same rounds are compared head to head: the paired interval of
``other / fastest`` per round, which is a tie when it reaches 1. Their two intervals against the
baseline would each carry the baseline's noise too: on the BERT-style encoder, bf16 at 1.80x and
LiteRT fp32 at 1.54x overlapped against the baseline, and fp32 was served, 15% slower. Candidates
timed in different rounds (memory groups, each beside the baseline in its own process) are
compared through their own baselines: the ratio of their two ratios, each group's rounds
resampled independently (:func:`tfopt.optimizer.benchmark.stats.unpaired_ratio_interval`), a tie when
it reaches 1. Asking whether their two intervals against the baseline overlap, as the rule did,
called a tie what either group's rounds already told apart: two 95% intervals overlap until
their difference is far beyond what either can show. Overlap remains the tie only for a
candidate with no samples to compare. The benchmark computes the same head-to-head interval
(:func:`tfopt.optimizer.benchmark.stats.head_to_head_interval`) while it times, and goes on timing, up to
its ``max_seconds``, while the tie between the fastest candidate and a more precise one is
unresolved (:func:`tfopt.optimizer.benchmark.stats.tie_unresolved`): a tie is then the rule's answer to
a comparison the time allowed could not settle, not to one cut short at the minimums.

What precision a candidate keeps is its record's :attr:`~tfopt.optimizer.candidates.candidate.Candidate.precision`
(from its variant). A result judged without its candidates' records (``tfopt gate`` on a result
file, ``tfopt benchmark`` on model files) has only their labels: :func:`precision_of_label`
reads the builders' label convention for those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from tfopt.optimizer.benchmark.stats import RatioInterval, tied
from tfopt.optimizer.candidates.candidate import FLOAT32, INT8, PRECISION_ORDER, REDUCED_FLOAT

# The builders' labels are ``{target}_{variant}`` (``litert_fp16``, ``onnx_static_int8``) or a
# SavedModel variant (``bf16``).
_REDUCED_FLOAT_SUFFIXES = ("fp16", "bf16")
_INTEGER_SUFFIX = "int8"


def precision_of_label(label: str) -> str:
    """The precision a builder's label says, for a candidate known by its label alone."""
    if label.endswith(_INTEGER_SUFFIX):
        return INT8
    return REDUCED_FLOAT if label.endswith(_REDUCED_FLOAT_SUFFIXES) else FLOAT32


def precision_rank(precision: str) -> int:
    """0: float32 (as the input computes); 1: reduced floats (fp16, bf16); 2: int8."""
    return PRECISION_ORDER.index(precision)


def _overlaps(a: RatioInterval, b: RatioInterval) -> bool:
    return a.low <= b.high and b.low <= a.high


# head to head: ``other / fastest`` per round at the gate's batch, None when the two were not
# timed in the same rounds
HeadToHead = Callable[[str, str], RatioInterval | None]


class Promoted(Protocol):
    """What the rule reads of a promoted candidate's verdict
    (:class:`tfopt.optimizer.gate.verdict.Verdict`): its label and its speedup."""

    @property
    def candidate(self) -> str: ...

    @property
    def speedup(self) -> float | None: ...


def choose_among_promoted(promoted: Sequence[Promoted],
                          intervals: dict[str, dict[int, RatioInterval]],
                          batch: int, precisions: Mapping[str, str] | None = None,
                          head_to_head: HeadToHead | None = None) -> str | None:
    """The promoted candidate to serve: the fastest, or among those tied with it (their
    ``head_to_head`` interval reaches 1; without one, their interval at ``batch`` overlaps the
    fastest one's), the most precise (:func:`precision_rank`), fastest first among equals.
    ``precisions``: label -> :attr:`Candidate.precision` from the candidates' records; a label
    without one is read by :func:`precision_of_label`. None when nothing was promoted."""
    if not promoted:
        return None
    fastest = max(promoted, key=lambda v: v.speedup or 0.0)
    reference = intervals.get(fastest.candidate, {}).get(batch)
    if reference is None:
        return fastest.candidate
    known = precisions or {}

    def rank(label: str) -> int:
        return precision_rank(known.get(label) or precision_of_label(label))

    def tied_with_fastest(label: str) -> bool:
        if label == fastest.candidate:
            return True
        paired = head_to_head(fastest.candidate, label) if head_to_head else None
        if paired is not None:
            return tied(paired)
        interval = intervals.get(label, {}).get(batch)
        return interval is not None and _overlaps(interval, reference)

    ties = [v for v in promoted if tied_with_fastest(v.candidate)]
    return min(ties, key=lambda v: (rank(v.candidate), -(v.speedup or 0.0))).candidate
