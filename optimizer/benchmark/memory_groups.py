"""Benchmark only what fits: baseline and candidates in groups that each fit the memory budget.

The harness loads every model it times into one process (:mod:`tfopt.optimizer.benchmark.harness`),
so that their calls interleave and share the machine's noise. When the baseline and all the
candidates, loaded together, would not fit in the memory budget (:mod:`tfopt.optimizer.system.memory_budget`;
the estimates: :mod:`tfopt.optimizer.model.footprint`), the candidates are split into groups that
do, each timed with the baseline, in a process of its own that exits (and gives its memory
back) before the next group starts. Every candidate's ratio is then still measured against the
baseline in the same process, on paired interleaved rounds: its group's. The combined result
holds each candidate's baseline rounds beside it (:attr:`ModelMeasurement.baseline_samples`),
which the gate resamples; the baseline's own figures are the first group's.

A group's estimate is what its models keep once loaded and called, plus the largest of their
loads' transient peaks (:func:`~tfopt.optimizer.model.footprint.group_bytes`: they load one after
another), plus what this process already holds (its tree's resident memory). When everything
fits (the usual case), the benchmark runs as it always has, in this process, and its result
is the same.

A big model (:func:`~tfopt.optimizer.model.footprint.builds_in_workers`) is always benchmarked in
such processes, and its groups fit its working set (twice the estimated by-hand LiteRT
conversion, :func:`~tfopt.optimizer.model.footprint.working_set_bytes`) rather than the whole
budget: a candidate over it beside the baseline alone (XLA from ~100 MB on) is left out like
one over the budget, unless none fits it, when the budget is the limit.

A candidate that cannot fit beside the baseline even alone is left out, with its estimate and
the budget in the result's notes (callers list it as skipped): it would be killed by the kernel
midway. When no candidate fits, :class:`~tfopt.optimizer.system.memory_budget.MemoryBudgetError` (exit 7)
says so in one line.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Sequence

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.model.footprint import (
    PROCESS_BYTES,
    LoadCost,
    builds_in_workers,
    group_bytes,
    working_set_bytes,
)
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget
from tfopt.optimizer.system.process_tree import TreeMeter, tree_rss_bytes
from tfopt.optimizer.system.worker_process import read_job, run_job

log = logging.getLogger(__name__)


class BenchmarkGroupError(TfoptError):
    """A benchmark group's process failed; its own error line says why."""


def plan_groups(fixed_bytes: int, candidates: Sequence[tuple[object, LoadCost]],
                budget: MemoryBudget, target_bytes: int | None = None,
                always: Sequence[LoadCost] = ()
                ) -> tuple[list[list[object]], list[tuple[object, int]]]:
    """``(groups, unfit)``: candidates (``(subject, estimated cost)``, in order) split into
    groups (each into the first with room) whose models, with ``always`` (the baseline and
    the reference, in every group) and ``fixed_bytes`` (the processes' own memory), fit the
    limit: ``target_bytes`` (a big model's working set), never more than the budget (one
    group when all fit). A group's models keep what each keeps and peak at the largest
    transient (:func:`~tfopt.optimizer.model.footprint.group_bytes`). Those that fit beside the
    baseline within the limit in no group are returned with that estimate."""
    limit = min(target_bytes or budget.bytes, budget.bytes)
    groups: list[list[object]] = []
    costs: list[list[LoadCost]] = []  # per group

    def needs(group_costs: list[LoadCost]) -> int:
        return fixed_bytes + group_bytes([*always, *group_costs])

    unfit: list[tuple[object, int]] = []
    for subject, cost in candidates:
        if needs([cost]) > limit:
            unfit.append((subject, needs([cost])))
            continue
        # the first group with room: each group re-times the baseline, so fewer is faster
        room = next((n for n, c in enumerate(costs) if needs([*c, cost]) <= limit), None)
        if room is None:
            groups.append([])
            costs.append([])
            room = len(groups) - 1
        groups[room].append(subject)
        costs[room].append(cost)
    return groups, unfit


def estimate_subject(subject, variant: str | None = None) -> LoadCost:
    from tfopt.optimizer.runtime import detect_format

    return LoadCost.of(subject.path, subject.format or detect_format(subject.path), variant)


def run_benchmark_within(budget: MemoryBudget, baseline, candidates: Sequence,
                         config=None, *, variants: dict[str, str] | None = None,
                         runtime=None, eval_data=None, reference=None,
                         progress: Callable[[str], None] | None = None,
                         policy: ScanPolicy = DEFAULT_POLICY, in_new_process=None):
    """:func:`~tfopt.optimizer.benchmark.harness.run_benchmark`, in groups that fit ``budget`` when
    the models together do not (each group in its own process). ``variants`` (candidate label
    -> variant, e.g. ``bf16``) sharpens the estimates. ``policy``: the model scan's, part of
    each group's job. ``in_new_process``: thread settings
    (:class:`~tfopt.optimizer.system.cpu_threads.RuntimeSettings`) this process's TensorFlow can no
    longer take (:func:`~tfopt.optimizer.system.cpu_threads.settings_take_effect_here`), in place of
    ``runtime``: the benchmark then runs in a process started with them, one group when all
    fit, so that it runs with the settings it records."""
    from tfopt.optimizer.benchmark.harness import BenchmarkConfig, run_benchmark

    config = config or BenchmarkConfig()
    say = progress or (lambda message: log.info("%s", message))
    variants = variants or {}
    # What this process (and anything it runs) already holds stays held while the models load.
    in_use = tree_rss_bytes() or 0
    always = [estimate_subject(baseline),
              *([estimate_subject(reference)] if reference is not None else [])]
    estimates = [(c, estimate_subject(c, variants.get(c.label))) for c in candidates]
    together = in_use + PROCESS_BYTES + group_bytes([*always, *(e for _, e in estimates)])
    # A big model is benchmarked in processes of their own, each holding the baseline and
    # the candidates that fit the working set (about twice converting the model by hand):
    # in this process, the models' memory would stay held until it exits.
    separate = builds_in_workers(baseline.path)
    if not separate and in_new_process is None and together <= budget.bytes:
        return run_benchmark(baseline, candidates, config, runtime=runtime,
                             eval_data=eval_data, progress=progress, reference=reference,
                             policy=policy)
    target = working_set_bytes(baseline.path) if separate else budget.bytes
    limit = (f"the working set of {target / GIB:.1f} GiB for a model of its size (twice "
             f"converting it by hand)" if target < budget.bytes
             else f"the budget of {budget.describe()}")
    # Each group's process starts its own runtime beside this one's memory.
    groups, unfit = plan_groups(in_use + PROCESS_BYTES, estimates, budget, target, always)
    if not groups and target < budget.bytes:
        # nothing fits the working set (XLA asked for alone): the budget is the limit, rather
        # than no verdict at all
        say(f"no candidate fits beside the baseline within {limit}: within the budget instead")
        target, limit = budget.bytes, f"the budget of {budget.describe()}"
        groups, unfit = plan_groups(in_use + PROCESS_BYTES, estimates, budget, None, always)
    for subject, needs in unfit:
        say(f"{subject.label} left out: benchmarking it beside the baseline needs an estimated "
            f"{needs / GIB:.1f} GiB, more than {limit}")
    if not groups:
        subject, needs = min(unfit, key=lambda pair: pair[1])
        budget.require(needs, f"benchmarking {subject.label} (the smallest candidate) beside "
                              f"the baseline")
    say(f"baseline and {len(candidates)} candidates need an estimated {together / GIB:.1f} "
        f"GiB together ({in_use / GIB:.1f} GiB already in use), against {limit}: timing "
        f"them in {len(groups)} group(s), the baseline in each, one process per group"
        + (", started with the thread settings" if in_new_process is not None else ""))
    results = []
    by_label = {c.label: e for c, e in estimates}
    for n, group in enumerate(groups, 1):
        # the estimate beside the group's measured peak (logged once it is done): what the
        # factors in tfopt.optimizer.model.footprint are calibrated against
        needs = PROCESS_BYTES + group_bytes([*always, *(by_label[s.label] for s in group)])
        say(f"group {n}/{len(groups)}: {', '.join(s.label for s in group)} (estimated "
            f"{needs / GIB:.2f} GiB for its process)")
        # sampled from here, this process waiting: the group's own peak (VmHWM) is reset at
        # each model's load by the harness's growth measure, and misses earlier transients
        with TreeMeter() as meter:
            results.append(_run_in_process(
                baseline, group, config,
                in_new_process or (runtime.requested if runtime is not None else None),
                eval_data, reference, policy))
        if meter.peak is not None:
            needs += in_use
            say(f"group {n}/{len(groups)}: the process tree peaked at {meter.peak / GIB:.2f} "
                f"GiB ({in_use / GIB:.1f} GiB of it this process), estimated {needs / GIB:.2f} "
                f"({meter.peak / needs:.2f}x)")
    if len(results) == 1 and not unfit:
        return results[0]  # all in one process: the same result as in this one
    combined = combine_groups(results, budget)
    if unfit:
        combined = dataclasses.replace(combined, notes=(*combined.notes, (
            f"left out, as they fit beside the baseline in no group within {limit}: "
            + ", ".join(f"{s.label} (needs an estimated {n / GIB:.1f} GiB)"
                        for s, n in unfit))))
    return combined


def combine_groups(results: Sequence, budget: MemoryBudget):
    """One result from the groups' results: the baseline (and reference) as the first group
    measured them, each candidate with the rounds of the baseline it was timed beside."""
    first = results[0]
    candidates, ratios = [], {}
    for result in results:
        for candidate in result.candidates:
            candidates.append(dataclasses.replace(
                candidate, baseline_samples=dict(result.baseline.samples)))
            ratios[candidate.label] = result.ratios[candidate.label]
    note = (f"timed in {len(results)} group{'s' if len(results) > 1 else ''} to fit the memory budget of {budget.describe()}, "
            f"the baseline in each: "
            + "; ".join(", ".join(c.label for c in r.candidates) for r in results)
            + ". Each candidate's ratio is to the baseline of its own group")
    return dataclasses.replace(
        first, candidates=tuple(candidates), ratios=ratios,
        wall_seconds=sum(r.wall_seconds for r in results), notes=(*first.notes, note))


def _run_in_process(baseline, group, config, settings, eval_data, reference, policy):
    """One group benchmarked by ``python -m tfopt.optimizer.benchmark.memory_groups``, which applies
    ``settings`` (a ``RuntimeSettings``; None: the defaults) before TensorFlow starts; its
    result once that process has exited."""
    from tfopt.optimizer.benchmark.result import BenchmarkResult

    outcome = run_job(__name__, {
        "baseline": baseline, "candidates": list(group), "config": config,
        "runtime": settings,
        "eval_data": eval_data, "reference": reference, "policy": policy,
        "log_level": logging.getLogger().getEffectiveLevel()})
    if outcome.answer is None:
        raise BenchmarkGroupError(
            f"the benchmark of {', '.join(s.label for s in group)} exited with code "
            f"{outcome.returncode}: {outcome.last_line()}")
    data = json.loads(outcome.answer)
    if "error" in data:
        error = BenchmarkGroupError(data["error"])
        error.exit_code = data["exit_code"]  # the group's own error's exit code
        raise error
    return BenchmarkResult.from_dict(data)


def main(argv: Sequence[str]) -> int:
    """The group's process: apply the thread settings, benchmark, write the result."""
    from tfopt.optimizer.benchmark.harness import run_benchmark
    from tfopt.optimizer.errors import first_line
    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    job, write_answer = read_job(argv)
    logging.basicConfig(level=job["log_level"], format="%(message)s", stream=sys.stderr)
    try:
        runtime = apply_runtime_settings(job["runtime"] or default_runtime_settings())
        result = run_benchmark(job["baseline"], job["candidates"], job["config"],
                               runtime=runtime, eval_data=job["eval_data"],
                               reference=job["reference"], policy=job["policy"])
    except TfoptError as exc:
        write_answer(json.dumps({"error": first_line(exc), "exit_code": exc.exit_code}))
        return exc.exit_code
    write_answer(result.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
