"""The whole pipeline in one process: what ``tfopt run`` does.

The steps of :mod:`tfopt.components.pipeline.step_table`, in its order, each run by
:func:`tfopt.components.pipeline.step_runner.run_step` on the outputs before it, as every orchestrator runs
them: source -> pull -> freeze + optimize (candidates) -> benchmark (vs the champion, else the
input) -> evaluate -> gate (report, tuning) -> publish. Every step is idempotent, so rerunning
after a failure resumes where it stopped. Before the first step on the pulled model, TensorFlow's
pools are sized as the benchmark asks (:func:`hold_benchmark_threads`): in one process the
benchmark then runs with the thread settings it records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import (
    BenchmarkOutput,
    CandidateModel,
    EvaluationOutput,
    GateOutput,
    PublishOutput,
    PulledModel,
)
from tfopt.components.pipeline.step_runner import COSTS_KEY, run_step, workspace_for
from tfopt.components.pipeline.step_table import BY_NAME, NAMES, STEP_COSTS_CONTEXT

log = logging.getLogger(__name__)

STEPS = NAMES
__all__ = ["STEPS", "STEP_COSTS_CONTEXT", "PipelineOutcome", "run_pipeline", "workspace_for"]


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


@dataclass(frozen=True)
class PipelineOutcome:
    pulled: PulledModel
    candidates: list[CandidateModel]
    benchmark: BenchmarkOutput
    evaluation: EvaluationOutput
    gate: GateOutput
    publish: PublishOutput | None
    workspace: str
    costs: dict[str, dict] | None = None  # step -> tfopt.optimizer.system.process_tree.Cost.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {"pull": self.pulled.to_dict(),
                "candidates": [c.to_dict() for c in self.candidates],
                "benchmark": self.benchmark.to_dict(), "evaluate": self.evaluation.to_dict(),
                "gate": self.gate.to_dict(),
                "publish": self.publish.to_dict() if self.publish else None,
                "workspace": self.workspace, "costs": self.costs}


def hold_benchmark_threads(config: PipelineConfig) -> None:
    """Size TensorFlow's pools as the benchmark step will ask, before any step starts it:
    TensorFlow sizes them once per process, so in one process the benchmark then runs with
    the settings it records, in this process. Where TensorFlow started already (another
    caller's), nothing changes: the benchmark step runs in a process started with them."""
    from tfopt.optimizer.system.cpu_threads import (
        apply_runtime_settings,
        default_runtime_settings,
        settings_take_effect_here,
    )

    settings = default_runtime_settings(config.benchmark.threads)
    if settings_take_effect_here(settings):
        apply_runtime_settings(settings)


def run_pipeline(config: PipelineConfig, run_context: dict[str, Any] | None = None,
                 publish_results: bool = True,
                 around_step: Callable[[str], AbstractContextManager] | None = None
                 ) -> PipelineOutcome:
    """Every step; without ``publish_results``, no registry is asked: the candidates are
    judged against the input and nothing is published. ``around_step(name)`` is entered around
    each step (the CLI's stage lines, :mod:`tfopt.components.cli.stage_lines`)."""
    from tfopt.optimizer.system.free_memory import return_freed_memory

    around_step = around_step or (lambda name: nullcontext())

    steps = NAMES if publish_results else NAMES[:NAMES.index("publish")]
    started = time.perf_counter()
    outputs: dict[str, dict] = {}
    held = False
    for n, name in enumerate(steps, 1):
        log.info("[%d/%d] %s (%.0fs)", n, len(NAMES), name, time.perf_counter() - started)
        if not held and BY_NAME[name].needs:  # a step on the pulled model may start TF
            hold_benchmark_threads(config)
            held = True
        with around_step(name):
            outputs[name] = run_step(name, config, outputs, run_context,
                                     offline=not publish_results)
        return_freed_memory()  # what the step held and freed, before the next one adds its own
        for stage, cost in outputs[name][COSTS_KEY].items():
            if stage == name or stage.startswith(f"{name}."):  # the step, then its parts
                log.info("%s: %.1fs, peak memory %s", stage, cost["wall_seconds"],
                         _gib(cost.get("peak_rss_bytes")))
    evaluation = EvaluationOutput.from_dict(outputs["evaluate"])
    return PipelineOutcome(
        pulled=PulledModel.from_dict(outputs["pull"]),
        candidates=[CandidateModel.from_dict(c) for c in evaluation.candidates],
        benchmark=BenchmarkOutput.from_dict(outputs["benchmark"]), evaluation=evaluation,
        gate=GateOutput.from_dict(outputs["gate"]),
        publish=PublishOutput.from_dict(outputs["publish"]) if "publish" in outputs else None,
        workspace=str(workspace_for(config, PulledModel.from_dict(outputs["pull"])).root),
        costs=outputs[steps[-1]][COSTS_KEY])
