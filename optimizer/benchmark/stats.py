"""Latency statistics: percentiles, and a paired block-bootstrap interval for a latency ratio.

The ratio the gate cares about is how long the candidate takes for what the baseline does in
one unit of time: below 1 the candidate is faster. It is the **median of the per-round ratios**
``candidate's round figure / baseline's round figure`` (one round = one block of consecutive
calls of every model, back to back; :mod:`tfopt.optimizer.benchmark.interleaved`): both blocks of a
round saw the same background load, and the load, a factor on both, cancels in their quotient
before any median is taken. For a steady load it is the ratio of the two p50s.

It was the ratio of the two models' medians, each over all rounds, which keeps the pairing only
in the resampling: the load's spread from round to round stays in each median and the interval
is as wide as the load is variable. Measured on frozen vs stock ResNet50 (one process, 300
rounds of single calls, load average 5-8; ``benchmarks/gate_power.py`` says more): the two
models' round figures had a coefficient of variation of 0.47 and a correlation of 0.71 between
their logarithms; at 50 rounds the 95% interval of the ratio of medians was 0.21 wide, that of
the median of ratios 0.029, and at 300 rounds 0.155 against 0.024, the point estimates 0.805
and 0.824.

A round's figure for a model is the median of its block (:func:`round_figures`): the block's own
p50, robust to the one call of a block that a preemption or a page fault hits (a mean would move
by a tenth of that call's delay per block of ten). The per-call percentiles a report shows are
over every call.

Rounds are not independent either: load on a shared machine comes in bursts that last many
rounds. A plain bootstrap would treat every round as fresh evidence and give an interval that is
too narrow, which on a noisy machine is how noise gets promoted. So this is a circular *block*
bootstrap: it resamples runs of ``block`` consecutive rounds (default about ``sqrt(rounds)``),
which keeps short-range correlation inside each resample and widens the interval accordingly
(the bootstrap's ``block`` is a run of rounds; a round's block of calls is ``block_size``).
The interval is the percentile interval of the resampled ratios; the seed is fixed, so the same
samples always give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.records import JsonRecord

DEFAULT_RESAMPLES = 2000
_CHUNK = 250  # resamples per vectorised batch, so memory stays at _CHUNK x rounds


@dataclass(frozen=True)
class LatencySummary(JsonRecord):
    """Per-call wall time in seconds over ``runs`` timed calls at one batch size."""

    runs: int
    p50: float
    p90: float
    p99: float
    mean: float
    min: float
    std: float
    throughput: float  # items per second: batch size / mean latency

    @classmethod
    def of(cls, seconds: Sequence[float], batch_size: int) -> LatencySummary:
        s = np.asarray(seconds, dtype=np.float64)
        p50, p90, p99 = np.percentile(s, [50, 90, 99])
        mean = float(s.mean())
        return cls(runs=int(s.size), p50=float(p50), p90=float(p90), p99=float(p99), mean=mean,
                   min=float(s.min()), std=float(s.std()),
                   throughput=batch_size / mean if mean > 0 else math.inf)


@dataclass(frozen=True)
class RatioInterval(JsonRecord):
    """``candidate p50 / baseline p50`` with a two-sided ``confidence`` interval."""

    ratio: float
    low: float
    high: float
    confidence: float
    rounds: int
    block: int
    resamples: int

    @property
    def speedup(self) -> float:
        """How many times faster the candidate is (``1 / ratio``)."""
        return 1.0 / self.ratio if self.ratio > 0 else math.inf

    @property
    def width(self) -> float:
        return self.high - self.low


def round_figures(seconds: Sequence[float], block_size: int = 1) -> np.ndarray:
    """Each round's figure for one model: the median of its ``block_size`` consecutive timed
    calls. ``seconds`` holds every call, round after round (a block of one is the call)."""
    s = np.asarray(seconds, dtype=np.float64)
    if block_size < 1 or s.size % block_size:
        raise ValueError(f"{s.size} timed calls do not split into rounds of {block_size}")
    return np.median(s.reshape(-1, block_size), axis=1)


def default_block(rounds: int) -> int:
    return max(1, round(math.sqrt(rounds)))


def _block_indices(rng: np.random.Generator, n: int, block: int, count: int) -> np.ndarray:
    """``count`` circular block-bootstrap index rows, each of length ``n``."""
    blocks = -(-n // block)
    starts = rng.integers(0, n, size=(count, blocks))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]) % n
    return idx.reshape(count, blocks * block)[:, :n]


def p50_ratio_interval(
    baseline: Sequence[float],
    candidate: Sequence[float],
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    block: int | None = None,
    seed: int = 0,
) -> RatioInterval:
    """Paired block-bootstrap interval for ``median(candidate[i] / baseline[i])``.

    ``baseline[i]`` and ``candidate[i]`` are the figures of the same round ``i``
    (:func:`round_figures`).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    per_round = _per_round_ratios(baseline, candidate)
    n = per_round.size
    block = min(block or default_block(n), n)
    medians = _resampled_medians(per_round, block, resamples, np.random.default_rng(seed))
    low, high = _central(medians, confidence)
    return RatioInterval(ratio=float(np.median(per_round)), low=float(low),
                         high=float(high), confidence=confidence, rounds=int(n), block=block,
                         resamples=int(resamples))


def _per_round_ratios(baseline: Sequence[float], candidate: Sequence[float]) -> np.ndarray:
    """``candidate[i] / baseline[i]``, for two paired series of 2 rounds or more."""
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired samples need equal lengths, got {a.shape} and {b.shape}")
    if a.size < 2:
        raise ValueError("a ratio interval needs at least 2 rounds")
    return b / a


def _central(resampled: np.ndarray, confidence: float) -> tuple[float, float]:
    """The central ``confidence`` share of a bootstrap distribution: its percentile bounds."""
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return float(low), float(high)


def _resampled_medians(per_round: np.ndarray, block: int, resamples: int,
                       rng: np.random.Generator) -> np.ndarray:
    """The median of ``per_round`` in each of ``resamples`` circular block resamples."""
    medians = []
    for done in range(0, resamples, _CHUNK):
        idx = _block_indices(rng, per_round.size, block, min(_CHUNK, resamples - done))
        medians.append(np.median(per_round[idx], axis=1))
    return np.concatenate(medians)


def unpaired_ratio_interval(fastest_baseline: Sequence[float], fastest: Sequence[float],
                            other_baseline: Sequence[float], other: Sequence[float],
                            confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES,
                            seed: int = 0) -> RatioInterval:
    """Two candidates timed in different rounds (memory groups, each beside the baseline in
    its own process): ``other``'s ratio to its baseline over ``fastest``'s to its, each series
    of per-round ratios resampled in its own rounds, independently. Each group's load cancels
    in its own per-round ratios; what is left is each group's noise, which the independent
    resampling carries. The tie test this serves (:func:`tied`) is sharper than asking whether
    the two intervals against the baseline overlap: two 95% intervals overlap until their
    difference is far beyond what either alone can show."""
    ratios = [_per_round_ratios(fastest_baseline, fastest),
              _per_round_ratios(other_baseline, other)]
    rng = np.random.default_rng(seed)
    blocks = [default_block(r.size) for r in ratios]
    fast, slow = (_resampled_medians(r, k, resamples, rng) for r, k in zip(ratios, blocks))
    low, high = _central(slow / fast, confidence)
    return RatioInterval(ratio=float(np.median(ratios[1]) / np.median(ratios[0])),
                         low=float(low), high=float(high), confidence=confidence,
                         rounds=int(min(r.size for r in ratios)), block=min(blocks),
                         resamples=int(resamples))


def head_to_head_interval(fastest: Sequence[float], other: Sequence[float],
                          confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES,
                          seed: int = 0) -> RatioInterval:
    """Two candidates timed in the same rounds, compared directly: the paired interval of
    ``other / fastest`` per round (their :func:`round_figures`). The load that slows every model
    of a round cancels in it, where each one's interval against the baseline carries the
    baseline's noise too. The gate's near-tie rule (:mod:`tfopt.optimizer.gate.near_ties`) and the
    harness's adaptive stopping both read this one interval: :func:`tied`,
    :func:`tie_unresolved`."""
    return p50_ratio_interval(fastest, other, confidence, resamples, seed=seed)


def tied(head_to_head: RatioInterval) -> bool:
    """``other`` is not shown slower than ``fastest``: their head-to-head interval reaches 1."""
    return head_to_head.low <= 1.0


def tie_unresolved(head_to_head: RatioInterval) -> bool:
    """Tied so far, but more rounds could still show ``other`` slower: the interval straddles
    1. Tied with the whole interval below 1, ``other`` is shown the faster of the two."""
    return tied(head_to_head) and head_to_head.high > 1.0


def twin_discrepancy(twin: RatioInterval | None) -> float:
    """How far apart two loads of one model measured (``twin``: the baseline's second load
    against the first, timed like a candidate), as a factor of at least 1: its ratio or the
    inverse, whichever is larger. ``None`` (no twin measured) is 1.

    A ratio interval covers round-to-round noise only. Two loads of one model in one process
    differ by more than that (placement in memory, a thread pool of their own: up to 9% for a
    ~10 us LiteRT model, while its interval was 0.1% wide), and under heavy contention by more
    again. The twin sees that, on the machine and at the moment the candidates were timed. Its
    point estimate, not the end of its interval: the candidate's own interval already covers
    the noise of its rounds, and counting the twin's noise on top cost ResNet50's 1.2x win 1
    promotion in 13 at a load average of 25 (``benchmarks/gate_power.py``).
    """
    if twin is None or twin.ratio <= 0:
        return 1.0
    return max(twin.ratio, 1.0 / twin.ratio)


def promotion_bound(min_speedup: float, twin: RatioInterval | None = None) -> float:
    """The ratio a candidate's interval must lie wholly below to be promoted: faster than the
    baseline by ``min_speedup`` and by the twin's discrepancy on top (:func:`twin_discrepancy`)."""
    return 1.0 / (min_speedup * twin_discrepancy(twin))
