"""The publish's MLflow run: found by its key or created, then fully logged, once.

A run holds the params, metrics and tags of :mod:`tfopt.components.publishing.run_record` and the
artifacts a reviewer reads: ``report/`` (report.html, report.md, report.json with the candidates
table, the charts), ``trace.json`` (the transforms applied, in order) and ``verdict.json``
(every check of the gate). Its models are logged models of their own
(:mod:`tfopt.components.publishing.logged_models`). The tag ``tfopt.logged`` is set last: a run
without it is logged again (params and tags rewritten with the same values, metrics with the
same timestamp, which the store deduplicates).
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from tfopt.components.publishing.claims import claim
from tfopt.components.publishing.publication import PUBLISH_KEY_TAG, Publication
from tfopt.components.publishing.run_record import identity_tags, run_metrics, run_params, run_tags
from tfopt.components.tracking import TrackingError, local_artifact_location

log = logging.getLogger(__name__)

LOGGED_TAG = "tfopt.logged"


def experiment_id(client, name: str, tracking_uri: str) -> str:
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


def find_run(client, experiment: str, key: str):
    """The run holding ``key``: the earliest by (start time, id), which every publish agrees on."""
    runs = client.search_runs([experiment], filter_string=f"tags.`{PUBLISH_KEY_TAG}` = '{key}'",
                              max_results=100)
    return min(runs, key=lambda r: (r.info.start_time, r.info.run_id), default=None)


def _log_artifacts(client, run_id: str, pub: Publication) -> None:
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


def log_run(client, pub: Publication) -> tuple[str, Any]:
    """``(experiment id, run)``: the publish's run, found by its key or created, fully logged."""
    from mlflow.entities import Metric, Param, RunTag

    experiment = experiment_id(client, pub.config.mlflow.experiment,
                               pub.config.mlflow.tracking_uri)

    def finished(run) -> bool:
        if run.data.tags.get(LOGGED_TAG) != "true":
            return False
        if run.data.tags.get("tfopt.verdict") != pub.verdict:
            # Only when the workspace was lost and the benchmark measured again meanwhile.
            log.warning("publish: run %s was logged with the verdict '%s', this attempt's is "
                        "'%s'; the run keeps its first measurements", run.info.run_id,
                        run.data.tags.get("tfopt.verdict"), pub.verdict)
        return True

    def fill(run, created: bool) -> None:
        if not created:
            log.info("publish: completing MLflow run %s, left unfinished", run.info.run_id)
        run_id, stamp = run.info.run_id, run.info.start_time
        client.log_batch(
            run_id,
            metrics=[Metric(k, v, stamp, 0) for k, v in sorted(run_metrics(pub).items())],
            params=[Param(k, v) for k, v in sorted(run_params(pub).items())],
            tags=[RunTag(k, v) for k, v in sorted(run_tags(pub).items())])
        _log_artifacts(client, run_id, pub)

    def finish(run):
        client.set_tag(run.info.run_id, LOGGED_TAG, "true")
        return client.get_run(run.info.run_id)

    run = claim(
        find=lambda: find_run(client, experiment, pub.key),
        create=lambda: client.create_run(experiment, run_name=f"{pub.model.label}-{pub.run_key}",
                                         tags=identity_tags(pub)),
        ident=lambda r: r.info.run_id, delete=lambda r: client.delete_run(r.info.run_id),
        finished=finished, fill=fill, finish=finish, what="MLflow run")
    return experiment, run
