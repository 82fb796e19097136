"""publish: the run logged to MLflow, the model registered, the champion alias moved on promotion.

What a reviewer finds in the experiment ``mlflow.experiment``, for each pipeline run:

- a run whose params are the config (dotted keys; the parts that change the result) and the
  recipe applied; whose metrics are, per model, ``<label>.latency_{p50,p90,p99,mean}_ms_b<batch>``,
  ``<label>.throughput_b<batch>`` (items/s), ``<label>.size_bytes``, ``<label>.load_seconds``,
  ``<label>.{rss,peak_rss}_growth_bytes``, ``<label>.<metric>`` on labelled data and
  ``<label>.fidelity_*`` against the baseline, and for candidates ``<label>.speedup_b<batch>``
  with ``<label>.speedup_ci_{low,high}_b<batch>`` at the gate's confidence (the baseline's label
  is ``baseline``, whatever it was benchmarked as, and beside a champion the unoptimized input's
  is ``input``); whose tags hold the verdict and its summary,
  the source URI and digest and the environment fingerprint (``env.*``); and whose artifacts are
  ``model/`` (the chosen candidate: a SavedModel, or its model file(s) with their JSON sidecar:
  ``model.tflite``, ``model.onnx``, or an OpenVINO ``model.xml`` and ``model.bin``;
  when the gate rejected, the fastest candidate, for review; with ``runtime_settings.json``,
  the thread settings and batch size tuned for it, also as ``tfopt.runtime.*`` tags), ``report/`` (Markdown, JSON and charts), ``trace.json`` (the transforms applied, in
  order) and ``verdict.json`` (every check of the gate);
- when the gate promoted: a version of ``mlflow.registered_model`` made from that ``model/``,
  tagged with the verdict, the source, the DAG run, the format and runtime it needs
  (``tfopt.format``, ``tfopt.runtime``), how to load it (``tfopt.load``), for an int8 model what
  it was calibrated on (``tfopt.calibration``: ``data``, or ``synthetic`` when no data was
  given and it calibrated on generated inputs; also on the run), and the alias
  ``mlflow.alias`` moved to it.

A rejected candidate is a run only. Registry versions are the models that passed the gate, so
whatever loads a version loads a blessed model; a reviewer who overrules the gate can register
``runs:/<run_id>/model`` by hand.

Idempotent, keyed by the workspace key (source digest, config fingerprint) and the DAG run id:
the run and the version carry that key in the tag ``tfopt.publish_key``, and each stage looks
for its result before acting. A rerun of the same DAG run makes no second run or version, and
one killed midway is completed: a run without its ``tfopt.logged`` tag is logged again (params
and tags rewritten with the same values, metrics with the same timestamp, which the store
deduplicates), a promoted run without a version gets one, a version the alias misses gets the
alias. An alias already on a newer version stays there, and the alias does not move while a
newer version exists: an old DAG run re-executed does not take production back.

MLflow has no atomic create-if-absent, so two publishes of the same key at once (a task started
twice, a retry while the first attempt still runs) or one retried request (MLflow's HTTP client
retries a POST whose answer timed out) can make two runs or versions. Both are settled by a
deterministic claim, read back after every create: of the versions carrying the key, the lowest
number wins and the others are deleted, by whichever publish sees them (numbers are given in
commit order, so whoever made a higher one sees the lowest); of the runs, the earliest (start
time, then id) wins, and a publish whose own run lost deletes it and logs into the winner, once
after creating it and again after logging. Only own runs are deleted, since another publish may
still be logging into its run; two runs remain only if the earlier-starting one is committed
after the later one's whole logging, and never two versions. Racing publishes also write the
same tags, params and alias at once, and the server's insert-or-update of a row is a read then
an insert: one of two such writes fails on the unique constraint although the row then holds the
same value, so a write that fails that way is tried once more (it then updates the row).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from components.artifacts import (
    CandidateModel,
    Candidates,
    EvaluationOutput,
    GateOutput,
    PublishOutput,
    PulledModel,
)
from components.config import PipelineConfig
from components.tracking import TrackingError, is_missing, local_artifact_location, mlflow_client
from components.workspace import Workspace
from optimizer.errors import TfoptError

log = logging.getLogger(__name__)

PUBLISH_KEY_TAG = "tfopt.publish_key"
LOGGED_TAG = "tfopt.logged"
MODEL_ARTIFACT = "model"
_TAG_LIMIT = 5000  # MLflow takes 8000 characters per tag value; summaries stay well below
_ALIAS_CHECKS = 5  # rounds of "was a newer version registered while the alias moved?"


class PublishInputError(TfoptError):
    """The inputs given to publish do not fit together (a chosen candidate that is missing...)."""


@dataclass(frozen=True)
class Publication:
    """What one publish logs, resolved from the step inputs before MLflow is touched."""

    config: PipelineConfig
    pulled: PulledModel
    model: CandidateModel  # the SavedModel logged under model/
    gate: GateOutput
    decision: dict[str, Any]  # optimizer.gate.GateDecision.to_dict()
    result: Any  # optimizer.benchmark.result.BenchmarkResult, accuracy filled in
    run_key: str
    dag_run_id: str | None
    run_context: dict[str, Any]

    @property
    def key(self) -> str:
        blob = f"{self.run_key}\n{self.dag_run_id or ''}"
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    @property
    def verdict(self) -> str:
        return "promote" if self.gate.promote else "reject"

    @property
    def load_instructions(self) -> str:
        return (self.model.how_to_load
                or f'tf.saved_model.load(path).signatures["{self.config.signature}"]')

    @cached_property  # read by the run's tags, the version's tags and the artifact upload
    def runtime_tags(self) -> dict[str, str]:
        """The chosen model's tuned thread settings and batch size (``tfopt.runtime.*``)."""
        path = self.gate.runtime_settings_path
        if not path or not Path(path).is_file():
            return {}
        from optimizer.runtime_tuning import TunedRuntimeSettings

        return TunedRuntimeSettings.from_json(path).to_tags()


def _candidate_list(candidates: Candidates | Sequence[CandidateModel | dict]
                    ) -> list[CandidateModel]:
    if isinstance(candidates, Candidates):
        return candidates.models()
    return [CandidateModel.from_dict(c) for c in candidates]


def _model_to_log(candidates: list[CandidateModel], gate: GateOutput,
                  decision: dict[str, Any]) -> CandidateModel:
    """The gate's choice; when it chose none, the fastest candidate, as the gate's report does."""
    if not candidates:
        raise PublishInputError("publish got no candidate models")
    by_label = {c.label: c for c in candidates}
    if gate.chosen is not None:
        if gate.chosen not in by_label:
            raise PublishInputError(f"the gate chose '{gate.chosen}', which is not among the "
                                    f"candidates ({', '.join(by_label)})")
        return by_label[gate.chosen]
    ranked = sorted(decision.get("verdicts", []), key=lambda v: v.get("speedup") or 0.0,
                    reverse=True)
    for verdict in ranked:
        if verdict.get("candidate") in by_label:
            return by_label[verdict["candidate"]]
    return candidates[-1]


def _publication(config: PipelineConfig, pulled: PulledModel,
                 candidates: Candidates | Sequence[CandidateModel | dict],
                 evaluation: EvaluationOutput, gate: GateOutput, ws: Workspace,
                 run_context: dict[str, Any] | None) -> Publication:
    from optimizer.benchmark.result import load_result

    try:
        decision = json.loads(Path(gate.verdict_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PublishInputError(f"cannot read the gate verdict {gate.verdict_path}: {exc}"
                                ) from None
    model = _model_to_log(_candidate_list(candidates), gate, decision)
    if not Path(model.artifact_dir).is_dir() or not Path(model.path).exists():
        raise PublishInputError(f"candidate '{model.label}' has no {model.format} model at "
                                f"{model.path}")
    run_context = dict(run_context or {})
    dag_run_id = run_context.get("dag_run_id")
    return Publication(config=config, pulled=pulled, model=model, gate=gate, decision=decision,
                       result=load_result(evaluation.result_path), run_key=ws.key,
                       dag_run_id=str(dag_run_id) if dag_run_id else None,
                       run_context=run_context)


# --- what is logged ----------------------------------------------------------------------------


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value if isinstance(value, str) else json.dumps(value)
    return flat


def run_params(pub: Publication) -> dict[str, str]:
    # The same parts of the config as its fingerprint: params cannot change once logged, and a
    # rerun with another workdir or execution mode is still the same publish.
    config = pub.config.model_dump(mode="json", exclude={"schedule", "execution", "workdir"})
    return {**_flatten(config), "recipe": pub.model.recipe or "(none: frozen only)",
            "candidate": pub.model.label, "candidate_kind": pub.model.kind}


def _metric_prefix(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-/ ]", "_", label)


def _interval(pub: Publication, label: str, batch: int):
    from optimizer.benchmark.stats import RatioInterval

    recomputed = pub.decision.get("intervals", {}).get(label, {}).get(str(batch))
    if recomputed:
        return RatioInterval.from_dict(recomputed)
    return pub.result.ratios.get(label, {}).get(batch)


def run_metrics(pub: Publication) -> dict[str, float]:
    result = pub.result
    metrics: dict[str, float] = {}
    for model in result.measured:
        prefix = ("baseline" if model is result.baseline
                  else "input" if model is result.reference else _metric_prefix(model.label))
        for batch, summary in sorted(model.latency.items()):
            for stat in ("p50", "p90", "p99", "mean"):
                metrics[f"{prefix}.latency_{stat}_ms_b{batch}"] = getattr(summary, stat) * 1e3
            metrics[f"{prefix}.throughput_b{batch}"] = summary.throughput
            if model.role == "candidate":
                interval = _interval(pub, model.label, batch)
                if interval is not None:
                    metrics[f"{prefix}.speedup_b{batch}"] = interval.speedup
                    metrics[f"{prefix}.speedup_ci_low_b{batch}"] = 1 / interval.high
                    metrics[f"{prefix}.speedup_ci_high_b{batch}"] = (
                        1 / interval.low if interval.low > 0 else math.inf)
        metrics[f"{prefix}.size_bytes"] = model.size_bytes
        metrics[f"{prefix}.load_seconds"] = model.load_seconds
        if model.rss_growth_bytes is not None:
            metrics[f"{prefix}.rss_growth_bytes"] = model.rss_growth_bytes
        if model.peak_rss_growth_bytes is not None:
            metrics[f"{prefix}.peak_rss_growth_bytes"] = model.peak_rss_growth_bytes
        if model.quality is not None:
            metrics[f"{prefix}.{_metric_prefix(model.quality.metric)}"] = model.quality.value
        if model.fidelity is not None:
            if model.fidelity.top1_agreement is not None:
                metrics[f"{prefix}.fidelity_top1_agreement"] = model.fidelity.top1_agreement
            metrics[f"{prefix}.fidelity_max_abs_diff"] = model.fidelity.max_abs_diff
            metrics[f"{prefix}.fidelity_max_rel_diff"] = model.fidelity.max_rel_diff
    metrics["gate.promote"] = 1.0 if pub.gate.promote else 0.0
    return {k: float(v) for k, v in metrics.items() if math.isfinite(v)}


def environment_tags(environment) -> dict[str, str]:
    runtime, cpus = environment.runtime, environment.runtime.cpus
    onednn = {True: "on", False: "off", None: "unknown"}[runtime.onednn_enabled]
    return {
        "env.cpu_model": environment.cpu_model or "unknown",
        "env.isa": ",".join(sorted(n for n, present in environment.isa.items() if present)),
        "env.cpus_available": str(cpus.available),
        "env.logical_cpus": str(cpus.logical_cpus),
        "env.cpu_quota": "none" if cpus.quota_cpus is None else f"{cpus.quota_cpus:g}",
        "env.tensorflow_version": environment.tensorflow_version,
        "env.onednn": onednn,
        "env.intra_op_threads": str(runtime.intra_op_threads),
        "env.inter_op_threads": str(runtime.inter_op_threads),
        "env.thread_settings_in_effect": str(runtime.settings_in_effect).lower(),
        "env.tfopt_version": environment.tfopt_version,
        "env.python_version": environment.python_version,
        "env.platform": environment.platform,
    }


def _identity_tags(pub: Publication) -> dict[str, str]:
    """What finds and explains a run or version: its key, its DAG run, its source."""
    tags = {PUBLISH_KEY_TAG: pub.key, "tfopt.run_key": pub.run_key,
            "tfopt.source_uri": pub.pulled.uri, "tfopt.source_digest": pub.pulled.digest}
    for name in ("dag_id", "dag_run_id", "task_id", "run_type"):
        if pub.run_context.get(name):
            tags[f"tfopt.{name}"] = str(pub.run_context[name])
    if pub.pulled.version:
        tags["tfopt.source_version"] = str(pub.pulled.version)
    return tags


def run_tags(pub: Publication) -> dict[str, str]:
    result = pub.result
    return {
        **_identity_tags(pub),
        "tfopt.verdict": pub.verdict,
        "tfopt.gate_summary": pub.gate.summary[:_TAG_LIMIT],
        "tfopt.chosen": pub.gate.chosen or "",
        "tfopt.logged_model": pub.model.label,
        "tfopt.model_digest": pub.model.digest,
        "tfopt.baseline": result.baseline.label,
        "tfopt.baseline_role": result.baseline.role,
        "tfopt.baseline_digest": result.baseline.digest,
        "tfopt.baseline_format": result.baseline.format,
        "tfopt.baseline_runtime": result.baseline.runtime,
        "mlflow.note.content": f"**{pub.verdict.upper()}** {pub.gate.summary}"[:_TAG_LIMIT],
        "tfopt.logged_format": pub.model.format,
        **_calibration_tag(pub),
        **environment_tags(result.environment),
        **pub.runtime_tags,
    }


def version_tags(pub: Publication) -> dict[str, str]:
    return {
        **_identity_tags(pub),
        "tfopt.verdict": pub.verdict,
        "tfopt.gate_summary": pub.gate.summary[:_TAG_LIMIT],
        "tfopt.candidate": pub.model.label,
        "tfopt.recipe": (pub.model.recipe or "")[:_TAG_LIMIT],
        "tfopt.model_digest": pub.model.digest,
        "tfopt.format": pub.model.format,
        "tfopt.runtime": pub.model.runtime,
        "tfopt.variant": pub.model.variant,
        "tfopt.signature": pub.config.signature,
        "tfopt.load": pub.load_instructions[:_TAG_LIMIT],
        **_calibration_tag(pub),
        **pub.runtime_tags,
    }


def _calibration_tag(pub: Publication) -> dict[str, str]:
    """``tfopt.calibration``: what an int8 model was calibrated on, ``data`` or ``synthetic``
    (inputs generated from the signature, no data given); absent for the others."""
    return {"tfopt.calibration": pub.model.calibration} if pub.model.calibration else {}


# --- the stages --------------------------------------------------------------------------------

_WRITE_CONFLICTS = ("IntegrityError", "UNIQUE constraint", "UniqueViolation", "Duplicate entry",
                    "duplicate key")


class _RaceTolerantClient:
    """An MlflowClient whose calls are tried once more after losing a unique-constraint race."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name: str):
        from mlflow.exceptions import MlflowException

        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            try:
                return attribute(*args, **kwargs)
            except MlflowException as exc:
                if not any(marker in str(exc) for marker in _WRITE_CONFLICTS):
                    raise
                log.info("publish: %s raced a concurrent write of the same row; once more", name)
                return attribute(*args, **kwargs)

        return call


def _experiment_id(client, name: str, tracking_uri: str) -> str:
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(
                name, artifact_location=local_artifact_location(tracking_uri))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":  # created meanwhile by another run
                raise
            experiment = client.get_experiment_by_name(name)
    if experiment.lifecycle_stage == "deleted":
        raise TrackingError(f"MLflow experiment '{name}' is deleted; restore it or set "
                            f"mlflow.experiment to another name")
    return experiment.experiment_id


def _find_run(client, experiment_id: str, key: str):
    """The run holding ``key``: the earliest by (start time, id), which every publish agrees on."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{PUBLISH_KEY_TAG}` = '{key}'",
                              max_results=100)
    return min(runs, key=lambda r: (r.info.start_time, r.info.run_id), default=None)


def _settle_run(client, experiment_id: str, key: str, run, created: bool):
    """The winning run for ``key``; ``run`` is deleted if this publish created it and it lost."""
    winner = _find_run(client, experiment_id, key)
    if winner is None or winner.info.run_id == run.info.run_id:
        return run
    log.warning("publish: a concurrent publish of the same key made MLflow run %s first; "
                "using it%s", winner.info.run_id,
                f" and deleting run {run.info.run_id}" if created else "")
    if created:
        client.delete_run(run.info.run_id)
    return winner


def _log_artifacts(client, run_id: str, pub: Publication) -> None:
    client.log_artifacts(run_id, pub.model.artifact_dir, MODEL_ARTIFACT)
    if pub.runtime_tags:  # beside the model, so that it travels with the registered version
        client.log_artifact(run_id, pub.gate.runtime_settings_path, MODEL_ARTIFACT)
    report_dir = pub.gate.report_dir
    if report_dir and Path(report_dir).is_dir():
        client.log_artifacts(run_id, report_dir, "report")
    else:
        log.warning("publish: the gate wrote no report directory (%s); none is logged", report_dir)
    with tempfile.TemporaryDirectory(prefix="tfopt-publish-") as tmp:
        trace = Path(tmp) / "trace.json"
        trace.write_text(json.dumps(pub.model.trace, indent=2) + "\n")
        verdict = Path(tmp) / "verdict.json"
        verdict.write_text(json.dumps(pub.decision, indent=2) + "\n")
        client.log_artifact(run_id, str(trace))
        client.log_artifact(run_id, str(verdict))


def _log_run(client, pub: Publication) -> tuple[str, Any]:
    """``(experiment id, run)``: the publish's run, found by its key or created, fully logged."""
    from mlflow.entities import Metric, Param, RunTag

    experiment_id = _experiment_id(client, pub.config.mlflow.experiment,
                                   pub.config.mlflow.tracking_uri)
    run, created = _find_run(client, experiment_id, pub.key), False
    if run is None:
        run = client.create_run(experiment_id, run_name=f"{pub.model.label}-{pub.run_key}",
                                tags=_identity_tags(pub))
        log.info("publish: created MLflow run %s", run.info.run_id)
        created = True
        settled = _settle_run(client, experiment_id, pub.key, run, created)
        run, created = settled, settled is run
    while True:
        if run.data.tags.get(LOGGED_TAG) == "true":
            log.info("publish: MLflow run %s is already logged", run.info.run_id)
            if run.data.tags.get("tfopt.verdict") != pub.verdict:
                # Only when the workspace was lost and the benchmark measured again meanwhile.
                log.warning("publish: run %s was logged with the verdict '%s', this attempt's "
                            "is '%s'; the run keeps its first measurements", run.info.run_id,
                            run.data.tags.get("tfopt.verdict"), pub.verdict)
            return experiment_id, run
        if not created:
            log.info("publish: completing MLflow run %s, left unfinished", run.info.run_id)
        run_id, stamp = run.info.run_id, run.info.start_time
        client.log_batch(
            run_id,
            metrics=[Metric(k, v, stamp, 0) for k, v in sorted(run_metrics(pub).items())],
            params=[Param(k, v) for k, v in sorted(run_params(pub).items())],
            tags=[RunTag(k, v) for k, v in sorted(run_tags(pub).items())])
        _log_artifacts(client, run_id, pub)
        # A racing publish's earlier run may have become visible while this one was logged.
        settled = _settle_run(client, experiment_id, pub.key, run, created)
        if settled is run:
            break
        run, created = settled, False
    client.set_tag(run_id, LOGGED_TAG, "true")
    return experiment_id, client.get_run(run_id)


def _find_version(client, name: str, key: str):
    """The lowest version carrying ``key``; any higher one is a duplicate and is deleted."""
    from mlflow.exceptions import MlflowException

    versions = client.search_model_versions(f"tags.`{PUBLISH_KEY_TAG}` = '{key}'")
    mine = sorted((v for v in versions if v.name == name), key=lambda v: int(v.version))
    for duplicate in mine[1:]:
        log.warning("publish: '%s' version %s duplicates version %s (same DAG run); deleting it",
                    name, duplicate.version, mine[0].version)
        try:
            client.delete_model_version(name, duplicate.version)
        except MlflowException as exc:
            if not is_missing(exc):  # deleted meanwhile by a racing publish
                raise
    return mine[0] if mine else None


def _register(client, pub: Publication, run) -> str:
    """The version registered from the run's model artifact, found by its key or created."""
    from mlflow.exceptions import MlflowException

    name = pub.config.mlflow.registered_model
    existing = _find_version(client, name, pub.key)
    if existing is not None:
        log.info("publish: '%s' version %s is already registered", name, existing.version)
        return str(existing.version)
    try:
        client.create_registered_model(
            name, description="TensorFlow SavedModels optimized by tfopt; versions are the ones "
                              "its quality gate promoted.")
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    try:
        version = client.create_model_version(
            name, source=f"{run.info.artifact_uri}/{MODEL_ARTIFACT}", run_id=run.info.run_id,
            tags=version_tags(pub), await_creation_for=60,
            description=f"{pub.gate.summary[:_TAG_LIMIT]}\n\nLoad with {pub.load_instructions}.")
        log.info("publish: registered '%s' version %s", name, version.version)
    except MlflowException as exc:
        if not is_missing(exc):
            raise
        # A racing publish of the same key deleted it as a duplicate while it was awaited.
    winner = _find_version(client, name, pub.key)
    if winner is None:
        raise TrackingError(f"'{name}': the version registered for this run is gone; "
                            f"run the publish again")
    return str(winner.version)


def _distinct_versions(client, name: str) -> set[int]:
    """The version numbers of ``name``, less duplicates about to be deleted (see _find_version)."""
    lowest: dict[str, int] = {}
    for found in client.search_model_versions(f"name = '{name}'"):
        key = found.tags.get(PUBLISH_KEY_TAG) or f"untagged {found.version}"
        lowest[key] = min(lowest.get(key, int(found.version)), int(found.version))
    return set(lowest.values())


def _move_alias(client, pub: Publication, version: str) -> bool:
    """Whether the alias now points at ``version``; never moved back from a newer version.

    The alias is read, then set: a publish of a newer version racing this one may set it in
    between, and this one would take it back. So the alias only moves to the newest version, and
    once moved, it is checked again against the versions registered meanwhile (which are newer,
    and concurrent: an older version a person moved the alias away from is never brought back).
    """
    from mlflow.exceptions import MlflowException

    name, alias = pub.config.mlflow.registered_model, pub.config.mlflow.alias
    known = _distinct_versions(client, name)
    current = client.get_registered_model(name).aliases.get(alias)
    if current is not None and str(current) == version:
        return True
    newer = max([v for v in known if v > int(version)] + [int(current or 0)])
    if newer > int(version):
        log.warning("publish: '%s' has version %s, newer than this run's %s; '%s@%s' left on %s",
                    name, newer, version, name, alias, current)
        return False
    if current is not None:
        client.set_model_version_tag(name, version, "tfopt.replaced_version", str(current))
    client.set_registered_model_alias(name, alias, version)
    log.info("publish: '%s@%s' moved from %s to version %s", name, alias,
             f"version {current}" if current is not None else "nowhere", version)
    for _ in range(_ALIAS_CHECKS):
        target = max(_distinct_versions(client, name) - known | {int(version)})
        current = client.get_registered_model(name).aliases.get(alias)
        if current is not None and int(current) >= target:
            return str(current) == version
        log.info("publish: '%s@%s' goes to version %s, registered meanwhile", name, alias, target)
        try:
            client.set_registered_model_alias(name, alias, str(target))
        except MlflowException as exc:
            # Seen while a racing publish of its key had not yet deleted it as a duplicate.
            if not is_missing(exc):
                raise
            log.info("publish: version %s was deleted meanwhile (a duplicate); looking again",
                     target)
    return False


def _step_name(run_context: dict[str, Any] | None) -> str:
    dag_run_id = (run_context or {}).get("dag_run_id")
    if not dag_run_id:
        return "publish"
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", str(dag_run_id))[:80]
    return f"publish/{slug}-{hashlib.sha256(str(dag_run_id).encode()).hexdigest()[:8]}"


def publish(config: PipelineConfig, pulled: PulledModel,
            candidates: Candidates | Sequence[CandidateModel | dict],
            evaluation: EvaluationOutput, gate: GateOutput, ws: Workspace,
            run_context: dict[str, Any] | None = None) -> PublishOutput:
    def run(_step_dir: Path) -> PublishOutput:
        pub = _publication(config, pulled, candidates, evaluation, gate, ws, run_context)
        settings = config.mlflow
        with mlflow_client(settings.tracking_uri) as plain_client:
            client = _RaceTolerantClient(plain_client)
            experiment_id, mlflow_run = _log_run(client, pub)
            run_id = mlflow_run.info.run_id
            version, moved = None, False
            if gate.promote:
                version = _register(client, pub, mlflow_run)
                moved = _move_alias(client, pub, version)
                client.set_tag(run_id, "tfopt.model_version", version)
            client.set_tag(run_id, "tfopt.alias_moved", str(moved).lower())
            client.set_terminated(run_id, "FINISHED")
        log.info("publish: %s; run %s%s", pub.verdict, run_id,
                 f", '{settings.registered_model}' version {version}" if version else "")
        return PublishOutput(tracking_uri=settings.tracking_uri, experiment_id=experiment_id,
                             run_id=run_id, registered_model=settings.registered_model,
                             version=version, alias=settings.alias, alias_moved=moved,
                             promote=gate.promote)

    return ws.reuse_or_run(_step_name(run_context), PublishOutput, run)
