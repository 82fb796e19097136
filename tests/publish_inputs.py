"""What ``tfopt step publish`` reads, made once per test session from real models and timings.

Tests that run publish as a process (to kill it, or to race twenty of them) need the outputs of
the steps it reads: pull, and gate (whose record carries the evaluation and the candidates
measured). They are made here the way
tests/test_publish.py makes them: model_zoo's keras_cnn, frozen and optimized, benchmarked
against a copy of the frozen graph that does extra output-neutral work, so the gate promotes on
any machine. A test module declares ``pytest_plugins = ["publish_inputs"]`` and takes the
session-scoped ``publish_inputs`` fixture; each test writes its own config (its own registered
model, experiment and workdir) with :meth:`PublishInputs.config`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

TFOPT = Path(sys.executable).parent / "tfopt"


@dataclass(frozen=True)
class PublishInputs:
    root: Path
    outputs: dict[str, dict]  # step name -> its output, as `tfopt step publish --inputs` takes

    @property
    def inputs_file(self) -> Path:
        return self.root / "inputs.json"

    def config(self, directory: Path, tracking_uri: str, name: str) -> Path:
        """A pipeline YAML publishing to registered model and experiment ``name``."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name}.yaml"
        path.write_text(
            f"source: {self.outputs['pull']['uri']}\n"
            f"workdir: {directory / 'work'}\n"
            "gate: {min_speedup: 1.05}\n"
            f"mlflow: {{tracking_uri: '{tracking_uri}', experiment: 'exp-{name}', "
            f"registered_model: '{name}'}}\n")
        return path

    def command(self, config: Path, run_id: str) -> list[str]:
        return [str(TFOPT), "step", "publish", "--config", str(config),
                "--inputs", f"@{self.inputs_file}", "--run-id", run_id]

    def start(self, config: Path, run_id: str, **env: str) -> subprocess.Popen:
        """``tfopt step publish`` as its own process (stdout: its output JSON)."""
        environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                       "MLFLOW_DISABLE_TELEMETRY": "true", **env}
        environment.pop("TFOPT_DEBUG", None)
        return subprocess.Popen(self.command(config, run_id), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=environment)


def judge(root: Path, baseline: Path, candidates: list, gate_config=None, eval_data=None,
          **benchmark):
    """``(evaluation, gate)`` outputs for ``candidates`` (CandidateModels) benchmarked against
    ``baseline`` and judged by the gate, with its verdict file and report under ``root``, as
    the evaluate and gate steps write them; ``eval_data`` (an ``.npz`` of ``x`` and ``y``):
    held-out accuracy instead of agreement with the baseline."""
    from tfopt.components.pipeline.artifacts import EvaluationOutput, GateOutput
    from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
    from tfopt.optimizer.candidates.candidate import Candidate
    from tfopt.optimizer.gate.selection import candidate_rows
    from tfopt.optimizer.gate.verdict import GateConfig, evaluate_gate
    from tfopt.optimizer.report.write import write_report
    from tfopt.optimizer.runtime import read_signature

    # enough rounds that a burst of load from the other test worker cannot hide a win:
    # 40 blocks of 10 calls time each model twice as long as 200 single calls did
    # and no twin of the baseline: the publish tests need a promotion, and under a heavy load
    # two loads of a small model were measured up to 1.4x apart (tests/test_gate.py tests it)
    settings = {"batch_sizes": (1,), "warmup": 3, "min_runs": 40, "min_seconds": 1.5,
                "twin": False, **benchmark}
    result = run_benchmark(
        Subject.baseline(baseline, label="input"),
        [Subject.candidate(c.path, label=c.label, format=c.format) for c in candidates],
        BenchmarkConfig(**settings), eval_data=eval_data)
    tags = [c.candidate().to_dict() for c in candidates]
    evaluation = EvaluationOutput(result_path=str(result.save(root / "evaluation.json")),
                                  has_labels=eval_data is not None, metric="top1",
                                  candidate_tags=tags,
                                  candidates=[c.to_dict() for c in candidates])
    decision = evaluate_gate(result, gate_config or GateConfig(min_speedup=1.05))
    verdict_path = root / "verdict.json"
    verdict_path.write_text(json.dumps(decision.to_dict(), indent=2))
    report = write_report(result, root / "report", decision,
                          candidate_rows=candidate_rows(result, decision,
                                                        [Candidate.from_dict(t) for t in tags]))
    shown = decision.verdict(decision.chosen) if decision.chosen else decision.verdicts[0]
    gate = GateOutput(promote=decision.promote, chosen=decision.chosen,
                      chosen_path=result.candidate(decision.chosen).path
                      if decision.chosen else None,
                      summary=shown.summary(), verdict_path=str(verdict_path),
                      report_dir=str(report.directory),
                      signature=read_signature(baseline).to_dict(),
                      evaluation=evaluation.to_dict())
    return evaluation, gate


def _build(root: Path, source: Path) -> dict[str, dict]:
    from benchmark_testing import with_output_neutral_work

    from tfopt.components.pipeline.artifacts import CandidateModel, PulledModel
    from tfopt.optimizer.benchmark.environment import model_digest
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.optimize.flow import apply_recipe
    from tfopt.optimizer.optimize.recipe import DEPLOYMENT_RECIPE, Recipe

    frozen = freeze(source)
    optimized = apply_recipe(frozen, Recipe.from_string(DEPLOYMENT_RECIPE))
    write_saved_model(frozen, root / "frozen")
    write_saved_model(optimized.model, root / "optimized")
    write_saved_model(with_output_neutral_work(frozen), root / "slowed_input")
    candidates = {
        "freeze": CandidateModel(label="frozen", path=str(root / "frozen"), kind="frozen",
                                 digest=model_digest(root / "frozen")),
        "optimize": CandidateModel(label="optimized", path=str(root / "optimized"),
                                   kind="optimized", digest=model_digest(root / "optimized"),
                                   recipe=optimized.recipe,
                                   trace=[step.to_dict() for step in optimized.trace]),
    }
    evaluation, gate = judge(root, root / "slowed_input", [candidates["optimize"]])
    assert gate.promote, gate.summary
    pulled = PulledModel(uri=str(source), path=str(source), digest=model_digest(source))
    return {"pull": pulled.to_dict(), **{k: v.to_dict() for k, v in candidates.items()},
            "evaluate": evaluation.to_dict(), "gate": gate.to_dict()}


@pytest.fixture(scope="session")
def publish_inputs(tmp_path_factory, model_dir) -> PublishInputs:
    root = tmp_path_factory.mktemp("publish_inputs")
    made = PublishInputs(root, _build(root, model_dir("keras_cnn")))
    made.inputs_file.write_text(json.dumps(made.outputs))
    return made
