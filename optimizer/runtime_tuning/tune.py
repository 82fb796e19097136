"""Tune a model's runtime: the thread search, then the batch curve under the best threads.

One set of probe processes serves both: after the search, every probe but the best one's exits
(and is waited for, so its shutdown is not timed), and the best one measures the batch curve.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.runtime_tuning.batch import (
    DEFAULT_BATCH_SIZES,
    measure_curve,
    recommend_batch,
    validate_batch_sizes,
)
from tfopt.optimizer.runtime_tuning.budget import require_one_probe
from tfopt.optimizer.runtime_tuning.checks import check_min_gain, positive
from tfopt.optimizer.runtime_tuning.grid import ThreadSetting, cpu_facts
from tfopt.optimizer.runtime_tuning.probes import Probes, Progress, close_all
from tfopt.optimizer.runtime_tuning.record import TunedRuntimeSettings
from tfopt.optimizer.runtime_tuning.settings import (
    DEFAULT_MIN_GAIN,
    DEFAULT_ROUNDS,
    DEFAULT_SECONDS_PER_PROBE,
    DEFAULT_TIME_BUDGET_SECONDS,
)
from tfopt.optimizer.runtime_tuning.threads import SIGN_TEST_LEVEL, prepare, run_search
from tfopt.optimizer.system.memory_budget import MemoryBudget, memory_budget

log = logging.getLogger(__name__)


def tune_runtime(
    model: str | os.PathLike,
    throughput_target: float | None = None,
    latency_slo_ms: float | None = None,
    signature: str = DEFAULT_SIGNATURE,
    grid: Sequence[ThreadSetting] | None = None,
    reference: ThreadSetting | None = None,
    rounds: int = DEFAULT_ROUNDS,
    seconds_per_probe: float = DEFAULT_SECONDS_PER_PROBE,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    time_budget_seconds: float = DEFAULT_TIME_BUDGET_SECONDS,
    min_gain: float = DEFAULT_MIN_GAIN,
    progress: Progress | None = None,
    *,
    policy: ScanPolicy = DEFAULT_POLICY,
    budget: MemoryBudget | None = None,
) -> TunedRuntimeSettings:
    """Search the thread grid, then measure the batch curve with the best setting's worker
    (``time_budget_seconds`` bounds the batch curve; the thread search takes
    ``rounds x settings x seconds_per_probe`` plus start-up). Every probe reads ``model``
    under ``policy``, the model scan's. The probes hold the model at once, one process each,
    within the memory ``budget`` (default
    :func:`~tfopt.optimizer.system.memory_budget.memory_budget`): refused up front when not even one
    fits by its load estimate; then the reference starts alone and only as many others as
    fit by its measured peak, all under the memory watchdog (:mod:`.budget`, :mod:`.probes`)."""
    say = progress or (lambda message: log.info("%s", message))
    positive("throughput_target", throughput_target, float)
    positive("latency_slo_ms", latency_slo_ms, float)
    positive("rounds", rounds)
    positive("seconds_per_probe", seconds_per_probe, float)
    positive("time_budget_seconds", time_budget_seconds, float)
    check_min_gain(min_gain)
    batch_sizes = validate_batch_sizes(batch_sizes)
    model, grid, reference, _ = prepare(model, signature, grid, reference, policy)
    budget = budget or memory_budget()
    require_one_probe(model, budget)
    cpus, quota, cpu_name = cpu_facts()
    with Probes(model, signature, grid, say, policy, budget, reference=reference) as running:
        search = run_search(running, reference, rounds, seconds_per_probe, min_gain, say)
        # Idle probes hold memory; wait for them to exit so their shutdown is not timed.
        close_all([p for s, p in running.items() if s != search.best])
        curve = measure_curve(running[search.best], batch_sizes, time_budget_seconds, say)
    slo = None if latency_slo_ms is None else latency_slo_ms / 1e3
    recommendation = recommend_batch(curve, throughput_target, slo)
    say(f"batch size: {recommendation.reason}")
    return TunedRuntimeSettings(
        model=model, intra_op_threads=search.best.intra_op_threads,
        inter_op_threads=search.best.inter_op_threads, num_threads=search.best.num_threads,
        recommended_batch_size=recommendation.batch_size, batch_reason=recommendation.reason,
        throughput_target=throughput_target, latency_slo_ms=latency_slo_ms,
        reference=reference, thread_probes=search.probes, batch_curve=curve.points,
        batches_not_measured=curve.not_measured, available_cpus=cpus, cpu_quota=quota,
        cpu_model=cpu_name, method=(
            f"{len(search.probes)} thread settings, each in its own process; {rounds} interleaved "
            f"rounds of {seconds_per_probe:g}s batch-1 timing per setting; score = median over "
            f"rounds of p50 / p50 of [{reference.label}] in the same round; a setting replaces "
            f"the reference only if its score is below {1 - min_gain:g} and it was faster in "
            f"enough rounds to pass a one-sided sign test at {SIGN_TEST_LEVEL:g}. Batch curve: "
            f"p50 per batch size under the chosen setting within {time_budget_seconds:g}s"))
