"""Run one pipeline step from the small JSON outputs of the steps before it.

This is the seam every orchestrator uses: ``tfopt step NAME`` (a containerized task), the
in-process Airflow tasks and the Kubeflow components all call :func:`run_step` with the config
and ``{step name: that step's output}``, and get the step's own output back as a dict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.artifacts import (
    BenchmarkOutput,
    CandidateModel,
    EvaluationOutput,
    GateOutput,
    PulledModel,
    candidate_models,
)
from components.config import PipelineConfig
from components.pipeline import STEP_COSTS_CONTEXT, STEPS, workspace_for
from optimizer.errors import TfoptError

COSTS_KEY = "costs"

# Which earlier outputs each step reads.
NEEDS: dict[str, tuple[str, ...]] = {
    "pull": (),
    "freeze": ("pull",),
    "optimize": ("pull",),
    "benchmark": ("pull", "freeze", "optimize"),
    "evaluate": ("pull", "benchmark"),
    "gate": ("pull", "evaluate"),
    "publish": ("pull", "freeze", "optimize", "evaluate", "gate"),
}


class StepInputError(TfoptError):
    """A step was called without the outputs of the steps it needs."""


def _require(name: str, inputs: dict[str, Any]) -> None:
    missing = [n for n in NEEDS[name] if not inputs.get(n)]
    if missing:
        raise StepInputError(f"step '{name}' needs the outputs of: {', '.join(missing)} "
                             f"(pass them with --inputs)")


def inherited_costs(inputs: dict[str, Any] | None) -> dict[str, dict]:
    """``{step: cost dict}`` of the steps before, as their outputs carry them forward."""
    costs: dict[str, dict] = {}
    for output in (inputs or {}).values():
        if isinstance(output, dict):
            costs.update(output.get(COSTS_KEY) or {})
    return costs


def run_step(name: str, config: PipelineConfig, inputs: dict[str, Any] | None = None,
             run_context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The step's output, plus under ``costs`` its own wall time and peak tree memory and
    those of every step before it (so publish, reading only some outputs, has them all)."""
    from optimizer.op_scan import using_policy
    from optimizer.process_tree import TreeMeter

    costs = inherited_costs(inputs)
    if name == "publish":
        run_context = {**(run_context or {}), STEP_COSTS_CONTEXT: costs}
    # Every model this step reads applies the config's security (see optimizer.op_scan).
    with using_policy(config.security.scan_policy()), TreeMeter() as meter:
        output = _run_step(name, config, inputs, run_context)
    return {**output, COSTS_KEY: {**costs, name: meter.cost.to_dict()}}


def _run_step(name: str, config: PipelineConfig, inputs: dict[str, Any] | None,
              run_context: dict[str, Any] | None) -> dict[str, Any]:
    if name not in STEPS:
        raise StepInputError(f"unknown step '{name}'; steps: {', '.join(STEPS)}")
    inputs = inputs or {}
    _require(name, inputs)
    if name == "pull":
        from components.steps.pull import pull

        return pull(config).to_dict()
    pulled = PulledModel.from_dict(inputs["pull"])
    ws = workspace_for(config, pulled)
    handlers: dict[str, Callable[[], Any]] = {
        "freeze": lambda: _freeze(config, pulled, ws),
        "optimize": lambda: _optimize(config, pulled, ws),
        "benchmark": lambda: _benchmark(config, pulled, inputs, ws, run_context or {}),
        "evaluate": lambda: _evaluate(config, inputs, ws),
        "gate": lambda: _gate(config, inputs, ws, inherited_costs(inputs)),
        "publish": lambda: _publish(config, pulled, inputs, ws, run_context or {}),
    }
    return handlers[name]().to_dict()


def _freeze(config, pulled, ws):
    from components.steps.freeze import freeze

    return freeze(config, pulled, ws)


def _optimize(config, pulled, ws):
    from components.steps.optimize import optimize

    return optimize(config, pulled, ws)


def _candidates(inputs) -> list[CandidateModel]:
    return candidate_models(*(CandidateModel.from_dict(inputs[n]) for n in ("freeze", "optimize")))


def _benchmark(config, pulled, inputs, ws, run_context):
    from components.steps.benchmark import baseline_for_run, benchmark

    champion = baseline_for_run(config, ws, run_context)
    return benchmark(config, pulled, _candidates(inputs), champion, ws)


def _evaluate(config, inputs, ws):
    from components.steps.evaluate import evaluate

    return evaluate(config, BenchmarkOutput.from_dict(inputs["benchmark"]), ws)


def _gate(config, inputs, ws, step_costs):
    from components.steps.gate import gate

    return gate(config, EvaluationOutput.from_dict(inputs["evaluate"]), ws, step_costs)


def _publish(config, pulled, inputs, ws, run_context):
    from components.steps.publish import publish

    return publish(config, pulled, _candidates(inputs),
                   EvaluationOutput.from_dict(inputs["evaluate"]),
                   GateOutput.from_dict(inputs["gate"]), ws, run_context)
