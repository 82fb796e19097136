"""The pipeline's steps, declared once: each step's name, function, output record, the earlier
outputs it reads, its named parts, and the memory its pod needs for a model of a given size.

Everything that runs the pipeline is built from :data:`STEPS`: ``tfopt run``
(:mod:`tfopt.components.pipeline.run`), ``tfopt step`` (:mod:`tfopt.components.pipeline.step_runner`), the Airflow DAG
in both its modes (``dags/model_optimization.py``, :mod:`tfopt.components.orchestration.kubernetes_tasks`) and the
Kubeflow pipeline (compiled by ``make kfp``). A step's typed inputs are the output
records of the steps it ``needs``, keyed by their names; its function takes a
:class:`StepCall` and returns its own record, which carries what the steps after it need.

This module imports only the standard library and :mod:`tfopt.components.pipeline.artifacts` (itself standard
library only): the DAG file parses without TensorFlow, and the Kubeflow compiler, in its own
environment, reads the same table. Step functions are named by ``module:function`` and imported
only when the step runs.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfopt.components.pipeline import artifacts
from tfopt.components.pipeline.artifacts import PulledModel, Record

MIB = 2**20
GIB = 2**30
# The key of run_context under which publish gets the steps' costs, logged as metrics.
STEP_COSTS_CONTEXT = "step_costs"


@dataclass(frozen=True)
class MemoryCost:
    """A stage's peak memory (its whole process tree), as a line through two measurements
    against the model's size on disk."""

    fixed_bytes: float
    per_model_byte: float

    @classmethod
    def through(cls, small: tuple[float, float], large: tuple[float, float]) -> MemoryCost:
        """The line through ``(model bytes on disk, peak bytes)`` of two models."""
        (size_a, peak_a), (size_b, peak_b) = small, large
        slope = (peak_b - peak_a) / (size_b - size_a)
        return cls(fixed_bytes=peak_a - slope * size_a, per_model_byte=slope)

    def peak(self, model_bytes: int) -> float:
        return self.fixed_bytes + self.per_model_byte * model_bytes


# Peak tree RSS per stage of `tfopt optimize`, measured for issue 18 on the dense MLPs of
# benchmarks/memory_scaling.py: mlp_25mb (48 MiB on disk) and mlp_100mb (191 MiB), in r23 (the
# optimize stage in a worker, candidates built one per worker, frozen models loaded without
# their load's copies) and r24 (the benchmark's groups within the working set, estimated from
# what each model keeps plus the largest load transient; XLA of mlp_100mb left out: its group
# peaked at 2.8 GiB). TensorFlow's runtime alone is ~0.5 GiB. Update these when the stages
# are remeasured; every pod's memory follows from them.
OPTIMIZE = MemoryCost.through((48 * MIB, 1.1 * GIB), (191 * MIB, 2.2 * GIB))
CANDIDATES = MemoryCost.through((48 * MIB, 1.1 * GIB), (191 * MIB, 2.1 * GIB))
BENCHMARK_AND_EVALUATE = MemoryCost.through((48 * MIB, 1.4 * GIB), (191 * MIB, 2.3 * GIB))
RUNTIME_BYTES = 0.5 * GIB
# A pod's memory (request = limit) over the estimated peak, rounded up to a 256 MiB step: the
# estimate is a line through two models, and a pod over its limit is killed without a word.
HEADROOM = 1.25
POD_MEMORY_STEP = 256 * MIB


@dataclass(frozen=True)
class Part:
    """Work a step does besides its main function, named so a reader finds it."""

    name: str
    function: str  # module:function
    what: str


@dataclass(frozen=True)
class Step:
    name: str
    function: str  # module:function, called with a StepCall, returning `output`
    output: type[Record]
    needs: tuple[str, ...]  # the steps whose outputs it reads, in the order it reads them
    what: str
    parts: tuple[Part, ...] = ()
    # The stages that run in its pod, whose largest peak sizes it; () for pull, which runs
    # before the model's size is known (its pod takes execution.kubernetes.memory_*).
    memory: tuple[MemoryCost, ...] = ()
    run_id: bool = False  # reads the orchestrator's run id (--run-id), which publish records

    def load(self) -> Callable[[StepCall], Record]:
        return load_function(self.function)

    def pod_memory(self, model_bytes: int) -> str | None:
        """Its pod's memory for a model of ``model_bytes`` on disk, as Kubernetes reads it."""
        if not self.memory:
            return None
        peak = max(max(cost.peak(model_bytes) for cost in self.memory), RUNTIME_BYTES)
        steps = math.ceil(peak * HEADROOM / POD_MEMORY_STEP)
        return f"{steps * POD_MEMORY_STEP // MIB}Mi"


def part_costs(step: str, costs: Mapping[str, dict]) -> dict[str, dict]:
    """``{"step.part": cost}``: how the costs of a step's parts measured on their own (the
    gate's ``tune``) are named beside the steps', in the report and as MLflow metrics."""
    return {f"{step}.{part}": cost for part, cost in costs.items()}


def load_function(reference: str) -> Callable:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class StepCall:
    """What a step function gets: the config (a ``tfopt.components.config.pipeline_config.PipelineConfig``, not
    imported here), the typed outputs of the steps it needs, its workspace, and the run."""

    config: Any
    inputs: Mapping[str, Record]
    workspace: Any  # tfopt.components.pipeline.workspace.Workspace
    run_context: dict[str, Any] = field(default_factory=dict)
    step_costs: dict[str, dict] = field(default_factory=dict)  # the steps before: their costs
    offline: bool = False  # no registry: judged against the input, never published

    @property
    def pulled(self) -> PulledModel:
        return self.inputs["pull"]  # type: ignore[return-value]

    def output(self, step: str) -> Any:
        return self.inputs[step]


STEPS: tuple[Step, ...] = (
    Step("pull", "tfopt.components.steps.pull:from_inputs", artifacts.PulledModel, (),
         "the source SavedModel on local disk, with its digest and size"),
    Step("freeze", "tfopt.components.steps.freeze:from_inputs", artifacts.CandidateModel,
         ("pull",),
         "the signature frozen, checked, written back: the simplest candidate",
         memory=(OPTIMIZE,)),  # not measured alone: the first half of the optimize stage
    Step("optimize", "tfopt.components.steps.optimize:from_inputs", artifacts.CandidateModel,
         ("pull",),
         "the recipe or search applied to the frozen graph, checked, written back",
         parts=(Part("candidates", "tfopt.components.steps.optimize:derive",
                     "bf16, XLA, LiteRT, ONNX, OpenVINO candidates built from the optimized "
                     "graph, as candidates.targets allows"),),
         memory=(OPTIMIZE, CANDIDATES)),
    Step("benchmark", "tfopt.components.steps.benchmark:from_inputs", artifacts.BenchmarkOutput,
         ("pull", "freeze", "optimize"),
         "baseline and every candidate timed in one process",
         parts=(Part("baseline", "tfopt.components.steps.benchmark:baseline_for_run",
                     "the registry's champion, looked up once per run, else the input"),),
         memory=(BENCHMARK_AND_EVALUATE,)),
    Step("evaluate", "tfopt.components.steps.evaluate:from_inputs", artifacts.EvaluationOutput,
         ("pull", "benchmark"), "every model's accuracy on labelled data, when there is some",
         memory=(BENCHMARK_AND_EVALUATE,)),
    Step("gate", "tfopt.components.steps.gate:from_inputs", artifacts.GateOutput,
         ("pull", "evaluate"),
         "the verdict on every candidate",
         parts=(Part("tune", "tfopt.components.steps.gate:tune",
                     "the chosen model's runtime settings (its cost: gate.tune)"),
                Part("report", "tfopt.components.steps.gate:report",
                     "the before/after report on the fastest candidate, with op profiles")),
         # not measured: it loads the baseline and one candidate, as the benchmark does more
         memory=(BENCHMARK_AND_EVALUATE,)),
    Step("publish", "tfopt.components.steps.publish:from_inputs", artifacts.PublishOutput,
         ("pull", "gate"),
         "the run logged to MLflow, the winner registered and its alias moved",
         # not measured: it loads each SavedModel it logs once, to check it serves
         memory=(OPTIMIZE,), run_id=True),
)
BY_NAME: dict[str, Step] = {step.name: step for step in STEPS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
