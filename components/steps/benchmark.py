"""benchmark: baseline and every candidate timed in ONE task, so on the same node and process.

The baseline is the registry's champion when there is one (the model the candidate would
replace), run in its own runtime with the thread setting recorded on its version, else the
unoptimized input model. Beside a champion the input is measured too, untimed: accuracy budgets
stay anchored to it (see tfopt.optimizer.gate.verdict).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import (
    BenchmarkOutput,
    CandidateModel,
    ChampionModel,
    PulledModel,
    Record,
    candidate_models,
)
from tfopt.components.pipeline.workspace import Workspace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BaselineChoice(Record):
    """Which champion a DAG run was judged against (``None``: there was none)."""

    champion: dict[str, Any] | None


def baseline_for_run(config: PipelineConfig, ws: Workspace,
                     run_context: dict[str, Any]) -> ChampionModel | None:
    """The registry's champion, looked up once per DAG run and then remembered.

    A retried or rerun DAG run must be judged against the baseline it was first judged
    against; otherwise its own promotion would become its baseline and flip its verdict.
    """
    from tfopt.components.tracking.champion import find_champion

    def lookup() -> BaselineChoice:
        champion = find_champion(config)
        return BaselineChoice(champion.to_dict() if champion else None)

    run_id = run_context.get("dag_run_id")
    if not run_id:
        choice = lookup()
    else:
        choice = ws.reuse_or_run(Workspace.keyed("baseline", str(run_id)), BaselineChoice,
                                 lambda _: lookup())
    return ChampionModel.from_dict(choice.champion) if choice.champion else None


def from_inputs(call) -> BenchmarkOutput:
    """The table's entry (tfopt.components.pipeline.step_table): the candidates freeze and optimize made,
    timed against the baseline, its named part (:func:`baseline_for_run`)."""
    champion = None if call.offline else baseline_for_run(call.config, call.workspace,
                                                          call.run_context)
    candidates = candidate_models(call.output("freeze"), call.output("optimize"))
    measured = benchmark(call.config, call.pulled, candidates, champion, call.workspace)
    # A record an older tfopt left in the workspace carries no candidates: they are these.
    return measured if measured.candidates else dataclasses.replace(
        measured, candidates=[c.to_dict() for c in candidates])


def benchmark(config: PipelineConfig, pulled: PulledModel, candidates: list[CandidateModel],
              champion: ChampionModel | None, ws: Workspace) -> BenchmarkOutput:
    from tfopt.components.pipeline.memory_check import require_inputs_fit

    require_inputs_fit(config, pulled, "benchmark")  # every batch size, before any is made

    def run(step_dir: Path) -> BenchmarkOutput:
        from tfopt.optimizer.benchmark.harness import Subject
        from tfopt.optimizer.benchmark.memory_groups import run_benchmark_within
        from tfopt.optimizer.benchmark.result import CHAMPION, UNOPTIMIZED_INPUT
        from tfopt.optimizer.system.cpu_threads import (
            apply_runtime_settings,
            default_runtime_settings,
            settings_take_effect_here,
        )
        from tfopt.optimizer.system.memory_budget import memory_budget

        reference = None
        if champion is not None:
            baseline = Subject.baseline(champion.path, role=CHAMPION, label=champion.label,
                                        format=champion.format,
                                        num_threads=champion.num_threads)
            reference = Subject.reference(pulled.path, label="input")
        else:
            baseline = Subject.baseline(pulled.path, role=UNOPTIMIZED_INPUT, label="input")
        from tfopt.optimizer.gate.near_ties import precision_rank

        # their records' precision, so that timing goes on while the gate's near-tie choice
        # between two of them is unresolved
        subjects = [Subject.candidate(c.path, label=c.label, format=c.format,
                                      precision_rank=precision_rank(c.precision))
                    for c in candidates]
        settings = config.benchmark.settings(settle_speedup=config.gate.min_speedup,
                                             confidence=config.gate.confidence,
                                             signature=config.signature)
        requested = default_runtime_settings(config.benchmark.threads)
        # In one process (tfopt run, Airflow's in-process tasks) the steps before have sized
        # TensorFlow's pools already: the benchmark then runs in a process started with the
        # settings, so that the threads it records are the ones it ran with.
        here = settings_take_effect_here(requested)
        log.info("benchmark: %s vs %s", baseline.label, ", ".join(c.label for c in candidates))
        result = run_benchmark_within(
            memory_budget(config.resources.memory_gb), baseline, subjects, settings,
            variants={c.label: c.variant for c in candidates if c.variant},
            runtime=apply_runtime_settings(requested) if here else None,
            in_new_process=None if here else requested,
            progress=lambda message: log.info("benchmark: %s", message), reference=reference,
            policy=config.security.scan_policy())
        runtime = result.environment.runtime
        if champion is not None and champion.intra_op_threads is not None and (
                champion.intra_op_threads, champion.inter_op_threads) != (
                runtime.intra_op_threads, runtime.inter_op_threads):
            # TensorFlow's pools are sized once per process: every TF model here shares them.
            result = dataclasses.replace(result, notes=(*result.notes, (
                f"{champion.label} was tuned to intra_op={champion.intra_op_threads}, "
                f"inter_op={champion.inter_op_threads}; it ran with this process's "
                f"intra_op={runtime.intra_op_threads}, inter_op={runtime.inter_op_threads}, "
                f"like every TensorFlow model here")))
        if champion is not None:  # for the gate: was the champion made from this input?
            result = dataclasses.replace(result, baseline=dataclasses.replace(
                result.baseline, source_digest=champion.source_digest))
        result_path = result.save(step_dir / "benchmark.json")
        return BenchmarkOutput(
            result_path=str(result_path), baseline_label=result.baseline.label,
            baseline_role=baseline.role, baseline_path=str(baseline.path),
            baseline_format=result.baseline.format, baseline_runtime=result.baseline.runtime,
            candidate_paths={c.label: c.path for c in candidates},
            candidate_tags=[c.candidate().to_dict() for c in candidates],
            candidates=[c.to_dict() for c in candidates])

    baseline_identity = champion.digest if champion is not None else pulled.digest
    return ws.reuse_or_run(Workspace.keyed("benchmark", baseline_identity), BenchmarkOutput, run)
