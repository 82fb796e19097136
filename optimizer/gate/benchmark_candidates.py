"""The benchmark stage: the candidates timed against the baseline, in one process per group.

:func:`benchmark_candidates` takes what the candidate-building stages made (each a
:class:`~tfopt.optimizer.candidates.candidate.Candidate`) and returns the
:class:`~tfopt.optimizer.benchmark.result.BenchmarkResult` the evaluate stage
(:func:`tfopt.optimizer.benchmark.accuracy.evaluate_models`) and the gate read. The pipeline's
``benchmark`` step and ``tfopt optimize --targets``
(:func:`tfopt.optimizer.gate.selection.select_candidate`) both call it, so both time the same
subjects the same way: with a memory budget, in groups that fit it
(:func:`tfopt.optimizer.benchmark.memory_groups.run_benchmark_within`), without one, all in this
process (:func:`tfopt.optimizer.benchmark.harness.run_benchmark`).

It sits in ``gate/``, not ``benchmark/``: each subject carries its candidate's precision as the
gate's near-tie rule ranks it (:func:`tfopt.optimizer.gate.near_ties.precision_rank`), so that timing
goes on while the gate's choice between two of them is unresolved, and the benchmark package
sits below the candidates (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tfopt.optimizer.benchmark.harness import Subject, run_benchmark
from tfopt.optimizer.benchmark.result import BenchmarkResult
from tfopt.optimizer.benchmark.settings import BenchmarkConfig
from tfopt.optimizer.candidates.candidate import Candidate
from tfopt.optimizer.gate.near_ties import precision_rank
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.verify.evaluation import LabelledData


def benchmark_candidates(
    baseline: Subject,
    candidates: Sequence[Candidate],
    config: BenchmarkConfig | None = None,
    *,
    reference: Subject | None = None,
    eval_data: LabelledData | None = None,
    budget=None,
    runtime=None,
    in_new_process=None,
    progress: Callable[[str], None] | None = None,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> BenchmarkResult:
    """``candidates`` timed against ``baseline`` (a :meth:`Subject.baseline`: the input or the
    registry's champion), with the untimed ``reference`` (the input, beside a champion). With
    labelled ``eval_data``, its rows are what is timed (:func:`run_benchmark` says why); its
    accuracy is the evaluate stage's. ``budget`` (a
    :class:`~tfopt.optimizer.system.memory_budget.MemoryBudget`): timed in groups that fit it when
    they do not all fit together; ``in_new_process`` (thread settings this process can no
    longer take) in place of ``runtime``: in a process started with them
    (:func:`~tfopt.optimizer.benchmark.memory_groups.run_benchmark_within`). A candidate that fits
    beside the baseline in no group is left out of the result, and its notes say why. Every
    SavedModel is read under ``policy``."""
    config = config or BenchmarkConfig()
    subjects = [Subject.candidate(c.path, label=c.label, format=c.format,
                                  precision_rank=precision_rank(c.precision))
                for c in candidates]
    if budget is None and in_new_process is None:
        return run_benchmark(baseline, subjects, config, runtime=runtime, eval_data=eval_data,
                             progress=progress, reference=reference, policy=policy)
    from tfopt.optimizer.benchmark.memory_groups import run_benchmark_within
    from tfopt.optimizer.system.memory_budget import memory_budget

    return run_benchmark_within(
        budget or memory_budget(), baseline, subjects, config,
        variants={c.label: c.variant for c in candidates if c.variant}, runtime=runtime,
        in_new_process=in_new_process, eval_data=eval_data, progress=progress,
        reference=reference, policy=policy)
