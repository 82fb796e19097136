"""Batch size: p50 latency per batch size in one probe process, and the recommendation.

Batch sizes are measured ascending within a time budget; one whose predicted cost would overrun
it is left out and listed, and so is every batch size from the one at which the memory watchdog
stopped the probe (its figure in the reason). Throughput is batch / p50. :func:`recommend_batch` works on the
measured points only, so its answer is always consistent with the figures it reports.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import computed_field

from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.records import JsonRecord
from tfopt.optimizer.runtime_tuning.checks import ProbeStopped, RuntimeTuningError, positive
from tfopt.optimizer.runtime_tuning.grid import ThreadSetting, has_per_model_threads, validate_grid
from tfopt.optimizer.runtime_tuning.probes import (
    PROBE_MIN_RUNS,
    PROBE_WARMUP,
    Probe,
    Probes,
    Progress,
)
from tfopt.optimizer.runtime_tuning.settings import DEFAULT_TIME_BUDGET_SECONDS
from tfopt.optimizer.runtime_tuning.threads import prepare

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class BatchPoint(JsonRecord):
    batch_size: int
    p50_seconds: float
    runs: int

    # These two are written with the figure they come from (read back, they are recomputed).
    @computed_field
    @property
    def p50_ms(self) -> float:
        return self.p50_seconds * 1e3

    @computed_field
    @property
    def throughput(self) -> float:
        """Items per second at this batch size: batch / p50."""
        return self.batch_size / self.p50_seconds


@dataclass(frozen=True)
class BatchCurve:
    points: tuple[BatchPoint, ...]
    not_measured: tuple[int, ...]  # batch sizes left out, for ``why_not``
    time_budget_seconds: float
    why_not: str = "not measured within the time budget"


def validate_batch_sizes(batch_sizes: Sequence[int]) -> tuple[int, ...]:
    if not batch_sizes:
        raise RuntimeTuningError("give at least one batch size")
    for b in batch_sizes:
        positive("batch size", b)
    return tuple(sorted(set(batch_sizes)))


def measure_curve(probe: Probe, batch_sizes: Sequence[int], time_budget: float,
           say: Progress) -> BatchCurve:
    # Each batch size's timed window; the rest of its share covers warm-up calls and the pipe.
    per_batch = 0.8 * time_budget / len(batch_sizes)
    started = time.monotonic()
    points: list[BatchPoint] = []
    for index, batch in enumerate(batch_sizes):
        if points:
            last = points[-1]
            # Latency grows at most about linearly with the batch on a CPU.
            call = last.p50_seconds * batch / last.batch_size
            needed = max(per_batch, call * (PROBE_WARMUP + PROBE_MIN_RUNS))
            if time.monotonic() - started + needed > time_budget:
                skipped = tuple(batch_sizes[index:])
                say(f"batch sizes {', '.join(map(str, skipped))} left out: they would overrun "
                    f"the {time_budget:g}s time budget")
                return BatchCurve(tuple(points), skipped, time_budget)
        try:
            measured = probe.measure(batch, per_batch)
        except ProbeStopped as stopped:
            skipped = tuple(batch_sizes[index:])
            say(f"batch sizes {', '.join(map(str, skipped))} left out: the probe was "
                f"{stopped.reason}")
            return BatchCurve(tuple(points), skipped, time_budget,
                              f"not measured: the probe was {stopped.reason}")
        points.append(BatchPoint(batch, measured["p50"], measured["runs"]))
        say(f"batch {batch}: p50 {measured['p50'] * 1e3:.2f}ms, "
            f"{points[-1].throughput:.1f} items/s ({measured['runs']} runs)")
    return BatchCurve(tuple(points), (), time_budget)


def measure_batch_curve(
    model: str | os.PathLike,
    setting: ThreadSetting | None = None,
    signature: str = DEFAULT_SIGNATURE,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    time_budget_seconds: float = DEFAULT_TIME_BUDGET_SECONDS,
    progress: Progress | None = None,
    *,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> BatchCurve:
    """p50 latency per batch size under ``setting`` (default: the reference), in one worker
    that reads ``model`` under ``policy``, the model scan's."""
    say = progress or (lambda message: log.info("%s", message))
    positive("time_budget_seconds", time_budget_seconds, float)
    batch_sizes = validate_batch_sizes(batch_sizes)
    model, _, reference, cpus = prepare(model, signature, None, None, policy)
    setting = setting or reference
    validate_grid([setting], setting, cpus, has_per_model_threads(model))
    with Probes(model, signature, [setting], say, policy) as running:
        return measure_curve(running[setting], batch_sizes, time_budget_seconds, say)


@dataclass(frozen=True)
class BatchRecommendation:
    batch_size: int | None  # None: no measured batch size meets the request
    reason: str


def recommend_batch(
    curve: BatchCurve | Sequence[BatchPoint],
    throughput_target: float | None = None,
    latency_slo_seconds: float | None = None,
) -> BatchRecommendation:
    """The batch size for a throughput target and/or a latency SLO, from measured points.

    Target only: the smallest batch whose throughput reaches it. SLO only: the largest batch
    whose p50 is within it. Both: the smallest batch reaching the target within the SLO.
    """
    positive("throughput_target", throughput_target, float)
    positive("latency_slo_seconds", latency_slo_seconds, float)
    points = sorted(curve.points if isinstance(curve, BatchCurve) else curve,
                    key=lambda p: p.batch_size)
    not_measured = curve.not_measured if isinstance(curve, BatchCurve) else ()
    if not points:
        return BatchRecommendation(None, "no batch size was measured")
    measured = f"measured batch sizes {', '.join(str(p.batch_size) for p in points)}"
    if not_measured:
        measured += f"; {', '.join(map(str, not_measured))} {curve.why_not}"
    if throughput_target is None and latency_slo_seconds is None:
        return BatchRecommendation(None, "no throughput target or latency SLO given")
    within = points if latency_slo_seconds is None else \
        [p for p in points if p.p50_seconds <= latency_slo_seconds]
    slo_text = "" if latency_slo_seconds is None else \
        f" within the {latency_slo_seconds * 1e3:g}ms latency SLO"
    if latency_slo_seconds is not None and not within:
        return BatchRecommendation(None, (
            f"unreachable: even batch {points[0].batch_size} has p50 "
            f"{points[0].p50_seconds * 1e3:.2f}ms, over the {latency_slo_seconds * 1e3:g}ms "
            f"latency SLO ({measured})"))
    if throughput_target is None:
        chosen = within[-1]
        return BatchRecommendation(chosen.batch_size, (
            f"batch {chosen.batch_size} is the largest with p50 within the "
            f"{latency_slo_seconds * 1e3:g}ms SLO: {chosen.p50_seconds * 1e3:.2f}ms, "
            f"{chosen.throughput:.1f} items/s ({measured})"))
    reaching = [p for p in within if p.throughput >= throughput_target]
    if not reaching:
        best = max(within, key=lambda p: p.throughput)
        return BatchRecommendation(None, (
            f"unreachable: no measured batch size reaches {throughput_target:g} items/s"
            f"{slo_text}; best {best.throughput:.1f} items/s at batch {best.batch_size} "
            f"({measured})"))
    chosen = reaching[0]
    smaller = [p for p in within if p.batch_size < chosen.batch_size]
    below = f"; batch {smaller[-1].batch_size} gives {smaller[-1].throughput:.1f}" \
        if smaller else ""
    return BatchRecommendation(chosen.batch_size, (
        f"batch {chosen.batch_size} is the smallest reaching {throughput_target:g} items/s"
        f"{slo_text}: {chosen.throughput:.1f} items/s at p50 "
        f"{chosen.p50_seconds * 1e3:.2f}ms{below} ({measured})"))
