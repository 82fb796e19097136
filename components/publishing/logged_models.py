"""Each model a publish logs: an MLflow 3 logged model holding an MLflow Model, with the gate's
metrics linked to it.

A logged model is named after its candidate (so ``runs:/<run_id>/<label>`` resolves to it, as
well as ``models:/<model_id>``), source-linked to the publish's run and listed as the run's
output, and tagged with the publish key and the candidate label, by which a rerun finds it. Its
files are written by :func:`tfopt.components.mlflow_models.write_mlflow_model` for that logged model
and uploaded; its metrics are the run's metrics of its label, logged again with its id. It is
marked ``READY`` last (MLflow's own "finished"), so one left ``PENDING`` by a killed publish is
filled again by the rerun; two made at once for one key are settled by
:mod:`tfopt.components.publishing.claims`.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from tfopt.components.pipeline.artifacts import CandidateModel
from tfopt.components.publishing.claims import claim
from tfopt.components.publishing.publication import CANDIDATE_TAG, PUBLISH_KEY_TAG, Publication
from tfopt.components.publishing.run_record import model_metrics, model_tags
from tfopt.components.storage.model_tree import check_model_tree

log = logging.getLogger(__name__)

MODEL_TYPE = "tfopt-candidate"


def find_logged_model(client, experiment: str, key: str, label: str):
    """The logged model of ``label`` for ``key``: the earliest made, which every publish
    agrees on."""
    found = client.search_logged_models(
        [experiment], max_results=100,
        filter_string=f"tags.`{PUBLISH_KEY_TAG}` = '{key}' AND tags.`{CANDIDATE_TAG}` = '{label}'")
    return min(found, key=lambda m: (m.creation_timestamp, m.model_id), default=None)


def _link_to_run(client, run, model_id: str) -> None:
    """List the model among the run's outputs (the run page shows them), once."""
    from mlflow.entities import LoggedModelOutput
    from mlflow.exceptions import MlflowException

    def linked() -> bool:
        outputs = client.get_run(run.info.run_id).outputs
        return model_id in {o.model_id for o in (outputs.model_outputs if outputs else [])}

    if linked():
        return
    try:
        client.log_outputs(run.info.run_id, [LoggedModelOutput(model_id, step=0)])
    except MlflowException:
        # Racing publishes of one key link the same model at once: the link is an insert, and
        # the loser's fails on the unique constraint (retried too) with the row already there.
        if not linked():
            raise


def log_model(client, pub: Publication, experiment: str, run, model: CandidateModel):
    """The ``READY`` logged model of ``model`` for this publish, found or made."""
    from mlflow.entities import LoggedModelStatus, Metric

    from tfopt.components.mlflow_models import write_mlflow_model

    run_id = run.info.run_id

    def fill(logged, _created: bool) -> None:
        with tempfile.TemporaryDirectory(prefix="tfopt-mlflow-model-") as tmp:
            directory = write_mlflow_model(
                model, pub.signature, Path(tmp) / model.label, logged_model=logged,
                runtime_settings=pub.runtime_settings_for(model))
            check_model_tree(directory, f"the MLflow Model of '{model.label}'")
            client.log_model_artifacts(logged.model_id, str(directory))
        stamp = run.info.start_time
        client.log_batch(run_id, metrics=[
            Metric(k, v, stamp, 0, run_id=run_id, model_id=logged.model_id)
            for k, v in sorted(model_metrics(pub, model).items())])
        _link_to_run(client, run, logged.model_id)

    return claim(
        find=lambda: find_logged_model(client, experiment, pub.key, model.label),
        create=lambda: client.create_logged_model(
            experiment, name=model.label, source_run_id=run_id, model_type=MODEL_TYPE,
            tags=model_tags(pub, model),
            params={"candidate": model.label, "kind": model.kind,
                    "recipe": (model.recipe or "(none)")[:6000]}),
        ident=lambda m: m.model_id, delete=lambda m: client.delete_logged_model(m.model_id),
        finished=lambda m: m.status == LoggedModelStatus.READY, fill=fill,
        finish=lambda m: client.finalize_logged_model(m.model_id, LoggedModelStatus.READY),
        what=f"logged model '{model.label}'")
