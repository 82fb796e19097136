"""publish: the run logged to MLflow, its models logged as MLflow Models, the winner registered.

What a reviewer finds in the experiment ``mlflow.experiment``, for each pipeline run:

- nothing at all when a SavedModel to be logged does not load and run the way TF Serving loads
  it (the TF1 loader in a Session, tag ``serve``: :mod:`tfopt.optimizer.verify.servability`), exit 7;
- a run whose params are the config (dotted keys; the parts that change the result) and the
  recipe applied; whose metrics are every model's latency, throughput, size, memory, accuracy
  and the gate's speedup, interval and accuracy drop per candidate
  (:mod:`tfopt.components.publishing.run_record`); whose tags hold the verdict and its summary, the
  source URI and digest and the environment fingerprint (``env.*``); whose description is the
  verdict in one line; and whose artifacts are ``report/`` (``report.html``, rendered by
  MLflow's artifact viewer, ``report.md``, ``report.json`` with the candidates table, and the
  charts), ``trace.json`` (the transforms applied, in order) and ``verdict.json`` (every check
  of the gate);
- the run's models, each an MLflow 3 logged model named after its candidate and holding an
  MLflow Model in the flavor its format has (:mod:`tfopt.components.mlflow_models`: a SavedModel in
  the ``tensorflow`` flavor, ONNX in the ``onnx`` flavor, LiteRT and OpenVINO through a pyfunc
  loader shipped with them), with a signature,
  an input example, pinned requirements, ``runtime_settings.json`` as tuned, and the gate's
  metrics of that candidate. On a pass these are every candidate that passed, the chosen one
  first; on a reject, the fastest candidate, for review
  (:mod:`tfopt.components.publishing.publication`);
- on a pass, a version of ``mlflow.registered_model`` made from the chosen candidate's logged
  model, tagged with the verdict, the source, the DAG run, the format and runtime it needs
  (``tfopt.format``, ``tfopt.runtime``), how to load it without MLflow (``tfopt.load``), for an
  int8 model what it was calibrated on (``tfopt.calibration``: ``data``, or ``synthetic`` when
  no data was given and it calibrated on generated inputs; also on the run), and
  described by the verdict line and a link to the report; the alias ``mlflow.alias`` moves to
  it. ``mlflow.pyfunc.load_model("models:/<name>@<alias>")`` loads it;
- on a reject, with ``publish.register_rejected`` set, a version of the fastest candidate with
  the alias ``challenger`` and the tag ``tfopt.lost_because``; without it (the default), the
  rejected model is a logged model of the run only, and a reviewer who overrules the gate
  registers ``models:/<model_id>`` by hand.

Idempotent, keyed by the workspace key (source digest, config fingerprint, which leaves out the
URL MLflow is reached at), the DAG run id and the gate's record it publishes
(:func:`tfopt.components.publishing.naming.gate_identity`), on the server that publish asks (the
workspace's record of a finished publish is found by the server's experiment id and creation
time, so ``localhost`` and ``127.0.0.1`` are one server and two servers sharing a workdir are
two): the run, its logged models and the version carry that key in the tag
``tfopt.publish_key``, and each stage looks for its result before acting. A gate that judged
again (``tfopt run`` rerun without ``--run-id`` after a promotion: the new champion is its
baseline) is another publish: its own run, with its own verdict, never the earlier publish's
record and alias move. A rerun of the same DAG run (the same gate record) makes no second run,
logged model or version, and one killed midway is completed: a run without its ``tfopt.logged``
tag is logged again, a logged model left ``PENDING`` is uploaded again and finalized, a run
without a version gets one, a version the alias misses gets the alias. Two publishes of one key
at once settle on one run and one logged model per candidate (:mod:`tfopt.components.publishing.
claims`) and one version (:mod:`tfopt.components.publishing.registry_protocol`, which also keeps an
alias from moving back to an older version); racing writes of the same row are retried once
(:class:`tfopt.components.publishing.registry_protocol.RaceTolerantClient`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import (
    CandidateModel,
    Candidates,
    EvaluationOutput,
    GateOutput,
    PublishOutput,
    PulledModel,
)
from tfopt.components.pipeline.workspace import Workspace
from tfopt.components.publishing.logged_models import log_model
from tfopt.components.publishing.naming import gate_identity, server_identity, step_name
from tfopt.components.publishing.publication import publication
from tfopt.components.publishing.registry_protocol import RaceTolerantClient, move_alias, register
from tfopt.components.publishing.run_logging import experiment_id, log_run
from tfopt.components.tracking import mlflow_client

log = logging.getLogger(__name__)


def checked_servable(ws: Workspace, model: CandidateModel, signature: str) -> None:
    """:func:`tfopt.optimizer.verify.servability.check_servable` once per model content in a workspace: the
    verdict is kept in ``servable/``, and publishes of the same candidate at once wait for the
    first one's (a check imports TensorFlow: hundreds of MB per process)."""
    import fcntl
    import json

    from tfopt.optimizer.verify.servability import NotServableError, check_servable

    directory = ws.root / "servable"
    directory.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(f"{model.digest}\0{signature}".encode()).hexdigest()[:24]
    verdict = directory / f"{name}.json"
    with open(directory / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if verdict.is_file():
            error = json.loads(verdict.read_text()).get("error")
            if error:
                raise NotServableError(error)
            return
        try:
            check_servable(model.path, signature, label=f"candidate '{model.label}'")
            error = None
        except NotServableError as exc:
            error = str(exc)
        partial = verdict.with_name(f".{verdict.name}.partial-{os.getpid()}")
        partial.write_text(json.dumps({"candidate": model.label, "digest": model.digest,
                                       "error": error}) + "\n")
        os.replace(partial, verdict)
    if error:
        raise NotServableError(error)


def from_inputs(call) -> PublishOutput:
    """The table's entry (tfopt.components.pipeline.step_table): everything publish needs comes from the
    gate's record (the evaluation it judged, and in it the candidates measured)."""
    from tfopt.components.pipeline.step_table import STEP_COSTS_CONTEXT
    from tfopt.components.publishing.publication import PublishInputError

    gate = call.output("gate")
    evaluation = EvaluationOutput.from_dict(gate.evaluation) if gate.evaluation else None
    if evaluation is None or not evaluation.candidates:
        raise PublishInputError("the gate's record carries no evaluated candidates (a gate "
                                "record from an older tfopt: rerun the gate step)")
    return publish(call.config, call.pulled, evaluation.candidates, evaluation, gate,
                   call.workspace, {**call.run_context, STEP_COSTS_CONTEXT: call.step_costs})


def publish(config: PipelineConfig, pulled: PulledModel,
            candidates: Candidates | Sequence[CandidateModel | dict],
            evaluation: EvaluationOutput, gate: GateOutput, ws: Workspace,
            run_context: dict[str, Any] | None = None) -> PublishOutput:
    settings = config.mlflow

    def run(_step_dir: Path) -> PublishOutput:
        pub = publication(config, pulled, candidates, evaluation, gate, ws, run_context)
        for model in pub.models:  # before anything reaches MLflow
            if model.format == "savedmodel":
                checked_servable(ws, model, config.signature)
        with mlflow_client(settings.tracking_uri) as plain_client:
            client = RaceTolerantClient(plain_client)
            experiment, mlflow_run = log_run(client, pub)
            run_id = mlflow_run.info.run_id
            logged = {model.label: log_model(client, pub, experiment, mlflow_run, model)
                      for model in pub.models}
            version, moved = None, False
            if pub.registered is not None:
                version = register(client, pub, pub.registered,
                                   logged[pub.registered.label], experiment, mlflow_run)
                moved = move_alias(client, pub, version)
                client.set_tag(run_id, "tfopt.model_version", version)
            client.set_tag(run_id, "tfopt.alias_moved", str(moved).lower())
            client.set_terminated(run_id, "FINISHED")
        log.info("publish: %s; run %s%s", pub.verdict, run_id,
                 f", '{settings.registered_model}' version {version} ({pub.role})"
                 if version else "")
        return PublishOutput(tracking_uri=settings.tracking_uri, experiment_id=experiment,
                             run_id=run_id, registered_model=settings.registered_model,
                             version=version, alias=pub.alias if version else settings.alias,
                             alias_moved=moved, promote=gate.promote,
                             model_uri=f"models:/{logged[pub.model.label].model_id}",
                             logged_models={label: m.model_id for label, m in logged.items()})

    # The workspace is shared by every URL of a server (the config's fingerprint leaves the URL
    # out), and by other servers too: a finished publish is this server's only if the server
    # says so.
    with mlflow_client(settings.tracking_uri) as client:
        experiment = experiment_id(client, settings.experiment, settings.tracking_uri)
        identity = server_identity(client, experiment)
    step = Workspace.keyed(step_name(run_context), identity, settings.experiment,
                           settings.registered_model, gate_identity(gate))
    done = ws.reuse_or_run(step, PublishOutput, run)
    return dataclasses.replace(done, tracking_uri=settings.tracking_uri)
