"""The whole pipeline in one process: what ``tfopt run`` and the in-process DAG tasks do.

source -> pull -> freeze + optimize (candidates) -> benchmark (vs the champion, else the input)
-> evaluate -> gate -> publish. Every step is idempotent, so rerunning after a failure resumes
where it stopped.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from components.artifacts import (
    BenchmarkOutput,
    CandidateModel,
    EvaluationOutput,
    GateOutput,
    PublishOutput,
    PulledModel,
    candidate_models,
)
from components.config import PipelineConfig
from components.workspace import Workspace

log = logging.getLogger(__name__)

STEPS = ("pull", "freeze", "optimize", "benchmark", "evaluate", "gate", "publish")
# The key of run_context under which publish gets the steps' costs, logged as metrics.
STEP_COSTS_CONTEXT = "step_costs"


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
    costs: dict[str, dict] | None = None  # step -> optimizer.process_tree.Cost.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {"pull": self.pulled.to_dict(),
                "candidates": [c.to_dict() for c in self.candidates],
                "benchmark": self.benchmark.to_dict(), "evaluate": self.evaluation.to_dict(),
                "gate": self.gate.to_dict(),
                "publish": self.publish.to_dict() if self.publish else None,
                "workspace": self.workspace, "costs": self.costs}


def workspace_for(config: PipelineConfig, pulled: PulledModel) -> Workspace:
    return Workspace.for_run(config.workdir, pulled.digest, config.fingerprint())


def run_pipeline(config: PipelineConfig, run_context: dict[str, Any] | None = None,
                 publish_results: bool = True) -> PipelineOutcome:
    from optimizer.op_scan import using_policy

    # Every model read in this run (the pull's scan first) applies the config's security.
    with using_policy(config.security.scan_policy()):
        return _run_pipeline(config, run_context, publish_results)


def _run_pipeline(config: PipelineConfig, run_context: dict[str, Any] | None,
                  publish_results: bool) -> PipelineOutcome:
    from components.steps.benchmark import benchmark
    from components.steps.evaluate import evaluate
    from components.steps.freeze import freeze
    from components.steps.gate import gate
    from components.steps.optimize import optimize
    from components.steps.pull import pull
    from optimizer.free_memory import return_freed_memory
    from optimizer.process_tree import TreeMeter

    run_context = dict(run_context or {})
    started = time.perf_counter()
    costs: dict[str, dict] = {}

    def step(n: int, name: str, run):
        log.info("[%d/%d] %s (%.0fs)", n, len(STEPS), name, time.perf_counter() - started)
        with TreeMeter() as meter:
            output = run()
        costs[name] = meter.cost.to_dict()
        return_freed_memory()  # what the step held and freed, before the next one adds its own
        log.info("%s: %.1fs, peak memory %s", name, meter.cost.wall_seconds,
                 _gib(meter.cost.peak_rss_bytes))
        return output

    pulled = step(1, "pull", lambda: pull(config))
    ws = workspace_for(config, pulled)
    frozen = step(2, "freeze", lambda: freeze(config, pulled, ws))
    optimized = step(3, "optimize", lambda: optimize(config, pulled, ws))
    candidates = candidate_models(frozen, optimized)
    champion = None
    if publish_results:
        from components.steps.benchmark import baseline_for_run

        champion = baseline_for_run(config, ws, run_context)
    bench = step(4, "benchmark", lambda: benchmark(config, pulled, candidates, champion, ws))
    evaluation = step(5, "evaluate", lambda: evaluate(config, bench, ws))
    verdict = step(6, "gate", lambda: gate(config, evaluation, ws, dict(costs)))
    published = None
    if publish_results:
        from components.steps.publish import publish

        context = {**run_context, STEP_COSTS_CONTEXT: dict(costs)}
        published = step(7, "publish", lambda: publish(config, pulled, candidates, evaluation,
                                                       verdict, ws, context))
    return PipelineOutcome(pulled, candidates, bench, evaluation, verdict, published,
                           str(ws.root), costs)
