"""Run one pipeline step from the small JSON outputs of the steps before it.

This is the seam every orchestrator uses: ``tfopt step NAME`` (a containerized task), the
in-process Airflow tasks, the Kubeflow components and ``tfopt run`` all call :func:`run_step`
with the config and ``{step name: that step's output}``, and get the step's own output back as
a dict. What a step is, what it reads and what it returns is :mod:`tfopt.components.pipeline.step_table`.
"""

from __future__ import annotations

import os
from typing import Any

from tfopt.components.config.pipeline_config import ConfigError, PipelineConfig
from tfopt.components.pipeline.artifacts import PulledModel
from tfopt.components.pipeline.step_table import BY_NAME, NAMES, Step, StepCall, part_costs
from tfopt.optimizer.errors import TfoptError

COSTS_KEY = "costs"
# Under this key the pull's output carries each later step's pod memory for the model pulled
# ({step: "6144Mi"}): the KubernetesPodOperator tasks template it, Kubeflow reads it as files.
POD_MEMORY_KEY = "pod_memory"

# Which earlier outputs each step reads.
NEEDS: dict[str, tuple[str, ...]] = {name: BY_NAME[name].needs for name in NAMES}
# TensorFlow finds a SavedModel's variables through a file pattern (tf.io.gfile.glob's syntax):
# in a path holding [ or \ it finds no file ("Failed to find any matching files"), and a * or
# ? matches other directories too (the glob of /tmp/g*/x/f found g*'s, g[1]'s and g\1's).
PATTERN_CHARACTERS = "[*?\\"


class StepInputError(TfoptError):
    """A step was called without the outputs of the steps it needs."""


def step_named(name: str) -> Step:
    if name not in BY_NAME:
        raise StepInputError(f"unknown step '{name}'; steps: {', '.join(NAMES)}")
    return BY_NAME[name]


def check_workdir(config: PipelineConfig) -> None:
    """Refuse, before any step writes there, a workdir whose path TensorFlow would read as a
    file pattern where it loads the models kept in it."""
    path = os.path.abspath(config.workdir)
    held = sorted({c for c in path if c in PATTERN_CHARACTERS})
    if held:
        raise ConfigError(
            f"workdir {path} holds {' '.join(held)}, which TensorFlow reads as a file pattern "
            f"where it loads a model's variables; choose a workdir without any of "
            f"{' '.join(PATTERN_CHARACTERS)}")


def _require(step: Step, inputs: dict[str, Any]) -> None:
    missing = [n for n in step.needs if not inputs.get(n)]
    if missing:
        raise StepInputError(f"step '{step.name}' needs the outputs of: {', '.join(missing)} "
                             f"(pass them with --inputs)")


def inherited_costs(inputs: dict[str, Any] | None) -> dict[str, dict]:
    """``{step: cost dict}`` of the steps before, as their outputs carry them forward."""
    costs: dict[str, dict] = {}
    for output in (inputs or {}).values():
        if isinstance(output, dict):
            costs.update(output.get(COSTS_KEY) or {})
    return costs


def pod_memory(config: PipelineConfig, model_bytes: int) -> dict[str, str]:
    """``{step: memory}`` of every step sized from the model (not pull): the table's estimate
    for ``model_bytes`` on disk, or ``resources.pod_memory_gb`` where it names the step."""
    overrides = config.resources.pod_memory_gb
    sized = {}
    for step in BY_NAME.values():
        estimate = step.pod_memory(model_bytes)
        if estimate is not None:
            sized[step.name] = (f"{round(overrides[step.name] * 1024)}Mi"
                                if step.name in overrides else estimate)
    return sized


def run_step(name: str, config: PipelineConfig, inputs: dict[str, Any] | None = None,
             run_context: dict[str, Any] | None = None, *, offline: bool = False
             ) -> dict[str, Any]:
    """The step's output, plus under ``costs`` its own wall time and peak tree memory (and
    those of the parts it measured on their own, as ``step.part``) and those of every step
    before it (so publish, reading only some outputs, has them all).
    ``offline``: no registry, so no champion to judge against (``tfopt run`` without publish).
    """
    from tfopt.optimizer.runtime.call_deadline import configure
    from tfopt.optimizer.system.process_tree import TreeMeter

    # every model call of the step, and of the workers it starts, under the run's deadline
    configure(config.resources.call_deadline())
    step = step_named(name)
    check_workdir(config)
    inputs = inputs or {}
    _require(step, inputs)
    costs = inherited_costs(inputs)
    # Every model the step reads is scanned under config.security.scan_policy(), which the step
    # passes down to each read (tfopt.optimizer.model.op_scan).
    with TreeMeter() as meter:
        output = _run(step, config, inputs, run_context or {}, costs, offline)
    result = {**output.to_dict(), COSTS_KEY: {**costs, **own_costs(name, meter.cost, output)}}
    if name == "pull" and output.size_bytes is not None:
        result[POD_MEMORY_KEY] = pod_memory(config, output.size_bytes)
    return result


def own_costs(name: str, cost, output) -> dict[str, dict]:
    """``{step: its cost}``, then ``{step.part: that part's cost}`` for each part its record
    measured on its own (``part_costs``: the gate's ``tune``)."""
    return {name: cost.to_dict(), **part_costs(name, getattr(output, "part_costs", None) or {})}


def workspace_for(config: PipelineConfig, pulled: PulledModel):
    """Where a run of ``config`` on the pulled model keeps its steps' results."""
    from tfopt.components.pipeline.workspace import Workspace

    return Workspace.for_run(config.workdir, pulled.digest, config.fingerprint())


def _run(step: Step, config: PipelineConfig, inputs: dict[str, Any],
         run_context: dict[str, Any], costs: dict[str, dict], offline: bool):
    records = {n: BY_NAME[n].output.from_dict(inputs[n]) for n in step.needs}
    workspace = workspace_for(config, records["pull"]) if "pull" in records else None
    call = StepCall(config=config, inputs=records, workspace=workspace,
                    run_context=run_context, step_costs=costs, offline=offline)
    return step.load()(call)
