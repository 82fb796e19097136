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


@dataclass(frozen=True)
class PipelineOutcome:
    pulled: PulledModel
    candidates: list[CandidateModel]
    benchmark: BenchmarkOutput
    evaluation: EvaluationOutput
    gate: GateOutput
    publish: PublishOutput | None
    workspace: str

    def to_dict(self) -> dict[str, Any]:
        return {"pull": self.pulled.to_dict(),
                "candidates": [c.to_dict() for c in self.candidates],
                "benchmark": self.benchmark.to_dict(), "evaluate": self.evaluation.to_dict(),
                "gate": self.gate.to_dict(),
                "publish": self.publish.to_dict() if self.publish else None,
                "workspace": self.workspace}


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

    run_context = dict(run_context or {})
    started = time.perf_counter()

    def step(n: int, name: str) -> None:
        log.info("[%d/%d] %s (%.0fs)", n, len(STEPS), name, time.perf_counter() - started)

    step(1, "pull")
    pulled = pull(config)
    ws = workspace_for(config, pulled)
    step(2, "freeze")
    frozen = freeze(config, pulled, ws)
    step(3, "optimize")
    optimized = optimize(config, pulled, ws)
    candidates = candidate_models(frozen, optimized)
    step(4, "benchmark")
    champion = None
    if publish_results:
        from components.steps.benchmark import baseline_for_run

        champion = baseline_for_run(config, ws, run_context)
    bench = benchmark(config, pulled, candidates, champion, ws)
    step(5, "evaluate")
    evaluation = evaluate(config, bench, ws)
    step(6, "gate")
    verdict = gate(config, evaluation, ws)
    published = None
    if publish_results:
        from components.steps.publish import publish

        step(7, "publish")
        published = publish(config, pulled, candidates, evaluation, verdict, ws, run_context)
    return PipelineOutcome(pulled, candidates, bench, evaluation, verdict, published,
                           str(ws.root))
