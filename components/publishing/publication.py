"""What one publish logs and registers, resolved from the step inputs before MLflow is touched.

The models a run logs as MLflow Models are the candidates that can be promoted: on a pass,
every candidate that passed the gate, the chosen one first (a reviewer can register another
one by hand, for a site that cannot run the chosen format); on a reject, the fastest candidate,
for review, as the report shows it. The one registered is the chosen candidate (the
``mlflow.alias`` champion), or on a reject, with ``publish.register_rejected`` set, that fastest
candidate (the ``challenger``).

Its key, ``tfopt.publish_key``, names the publish on every run, logged model and version it
makes: the workspace key (source digest, config fingerprint), the DAG run id and the gate's
record (:func:`tfopt.components.publishing.naming.gate_identity`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import (
    CandidateModel,
    Candidates,
    EvaluationOutput,
    GateOutput,
    PulledModel,
)
from tfopt.components.pipeline.workspace import Workspace
from tfopt.components.publishing.naming import gate_identity
from tfopt.components.storage.model_tree import check_model_tree
from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.model.signature import SignatureInfo

PUBLISH_KEY_TAG = "tfopt.publish_key"
CANDIDATE_TAG = "tfopt.candidate"
CHAMPION, CHALLENGER = "champion", "challenger"
CHALLENGER_ALIAS = "challenger"


class PublishInputError(TfoptError):
    """The inputs given to publish do not fit together (a chosen candidate that is missing...)."""


@dataclass(frozen=True)
class Publication:
    config: PipelineConfig
    pulled: PulledModel
    models: tuple[CandidateModel, ...]  # logged as MLflow Models; the run's model first
    registered: CandidateModel | None  # the champion or challenger to register, if any
    signature: SignatureInfo  # the source's serving signature, which every candidate keeps
    gate: GateOutput
    decision: dict[str, Any]  # tfopt.optimizer.gate.verdict.GateDecision.to_dict()
    result: Any  # tfopt.optimizer.benchmark.result.BenchmarkResult, accuracy filled in
    run_key: str
    dag_run_id: str | None
    run_context: dict[str, Any]

    @property
    def key(self) -> str:
        blob = f"{self.run_key}\n{self.dag_run_id or ''}\n{gate_identity(self.gate)}"
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    @property
    def verdict(self) -> str:
        return "promote" if self.gate.promote else "reject"

    @property
    def model(self) -> CandidateModel:
        """The run's model: the chosen candidate, or the fastest when none passed."""
        return self.models[0]

    @property
    def role(self) -> str:
        return CHAMPION if self.gate.promote else CHALLENGER

    @property
    def alias(self) -> str:
        """The alias the registered version gets."""
        return self.config.mlflow.alias if self.gate.promote else CHALLENGER_ALIAS

    def load_instructions(self, model: CandidateModel) -> str:
        """``model``'s load snippet; the chosen one's with the thread settings tuning chose,
        which are the settings it should be served with."""
        from tfopt.optimizer.candidates.build import savedmodel_load_instructions

        snippet = model.how_to_load or savedmodel_load_instructions(self.config.signature)
        tuned = self.runtime_settings_for(model)
        if tuned is None:
            return snippet
        from tfopt.optimizer.runtime_tuning import TunedRuntimeSettings

        return TunedRuntimeSettings.from_json(tuned).load_snippet(snippet)

    def candidate_verdict(self, label: str) -> dict[str, Any]:
        return next((v for v in self.decision.get("verdicts", []) if v.get("candidate") == label),
                    {})

    @cached_property  # read by the run's tags, the versions' tags and the model directories
    def runtime_tags(self) -> dict[str, str]:
        """The chosen model's tuned thread settings and batch size (``tfopt.runtime.*``)."""
        path = self.gate.runtime_settings_path
        if not path or not Path(path).is_file():
            return {}
        from tfopt.optimizer.runtime_tuning import TunedRuntimeSettings

        return TunedRuntimeSettings.from_json(path).to_tags()

    def runtime_settings_for(self, model: CandidateModel) -> str | None:
        """``runtime_settings.json`` when tuning measured ``model`` (the chosen one only)."""
        return self.gate.runtime_settings_path if (
            self.runtime_tags and model.label == self.gate.chosen) else None


def _candidate_list(candidates: Candidates | Sequence[CandidateModel | dict]
                    ) -> list[CandidateModel]:
    if isinstance(candidates, Candidates):
        return candidates.models()
    return [CandidateModel.from_dict(c) for c in candidates]


def publishable_labels(decision: dict[str, Any]) -> list[str]:
    """What a run logs as MLflow Models, by label: the chosen candidate and the others that
    passed, fastest first; when none passed, the fastest candidate, as the gate's report
    shows it. The gate step records it (``GateOutput.publishable``)."""
    verdicts = decision.get("verdicts", [])
    chosen = decision.get("chosen")
    if chosen is not None:
        passed = [v["candidate"] for v in sorted(verdicts, key=lambda v: -(v.get("speedup") or 0))
                  if v.get("promote") and v["candidate"] != chosen]
        return [chosen, *passed]
    ranked = sorted(verdicts, key=lambda v: v.get("speedup") or 0.0, reverse=True)
    return [v["candidate"] for v in ranked[:1]]


def models_to_log(candidates: list[CandidateModel], gate: GateOutput,
                  decision: dict[str, Any]) -> list[CandidateModel]:
    """The candidates the gate named publishable (a gate record written before it named
    them: ranked here as the gate ranks them)."""
    if not candidates:
        raise PublishInputError("publish got no candidate models")
    by_label = {c.label: c for c in candidates}
    if gate.chosen is not None and gate.chosen not in by_label:
        raise PublishInputError(f"the gate chose '{gate.chosen}', which is not among the "
                                f"candidates ({', '.join(by_label)})")
    labels = gate.publishable or publishable_labels({**decision, "chosen": gate.chosen})
    if gate.chosen is not None:
        return [by_label[label] for label in labels if label in by_label]
    for label in labels:
        if label in by_label:
            return [by_label[label]]
    return [candidates[-1]]


def _signature(config: PipelineConfig, pulled: PulledModel, gate: GateOutput) -> SignatureInfo:
    """The serving signature as the gate recorded it, else read from the source (which loads
    TensorFlow's protos: seconds in a process that needs nothing else of it)."""
    if gate.signature:
        return SignatureInfo.from_dict(gate.signature)
    from tfopt.optimizer.runtime import read_signature

    return read_signature(pulled.path, config.signature, policy=config.security.scan_policy())


def publication(config: PipelineConfig, pulled: PulledModel,
                candidates: Candidates | Sequence[CandidateModel | dict],
                evaluation: EvaluationOutput, gate: GateOutput, ws: Workspace,
                run_context: dict[str, Any] | None) -> Publication:
    from tfopt.optimizer.benchmark.result import load_result

    try:
        decision = json.loads(Path(gate.verdict_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PublishInputError(f"cannot read the gate verdict {gate.verdict_path}: {exc}"
                                ) from None
    models = models_to_log(_candidate_list(candidates), gate, decision)
    for model in models:
        if not Path(model.artifact_dir).is_dir() or not Path(model.path).exists():
            raise PublishInputError(f"candidate '{model.label}' has no {model.format} model at "
                                    f"{model.path}")
        # What is uploaded holds its files itself: a link would upload what it points at.
        check_model_tree(model.artifact_dir, f"candidate '{model.label}' ({model.artifact_dir})")
    registered = models[0] if gate.promote or config.publish.register_rejected else None
    run_context = dict(run_context or {})
    dag_run_id = run_context.get("dag_run_id")
    return Publication(config=config, pulled=pulled, models=tuple(models),
                       registered=registered, signature=_signature(config, pulled, gate),
                       gate=gate,
                       decision=decision, result=load_result(evaluation.result_path),
                       run_key=ws.key, dag_run_id=str(dag_run_id) if dag_run_id else None,
                       run_context=run_context)
