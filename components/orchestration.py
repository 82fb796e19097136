"""What the Airflow DAG needs at run time, kept out of the DAG file so parsing stays light.

The DAG file only declares: :func:`in_process_tasks` makes a task per step of
:mod:`tfopt.components.pipeline.step_table`, each calling :func:`run_dag_step`, which loads the config (the
DAG's YAML, then what the run's trigger may set: the asset event's extra and ``dag_run.conf``,
checked against the YAML's ``triggers`` section by :mod:`tfopt.components.config.trigger_conf`), takes
credentials from an Airflow connection when one is named, and runs the step through
:func:`tfopt.components.pipeline.step_runner.run_step`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tfopt.components.config import trigger_conf
from tfopt.components.config.pipeline_config import PipelineConfig, load_config
from tfopt.components.config.trigger_conf import ASSET_EXTRA_KEYS

PARAMS_SCHEMA = trigger_conf.PARAMS_SCHEMA  # the DAG's Params (dags/model_optimization.py)

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "dags" / "model_optimization.yaml"
CONFIG_ENV = "TFOPT_PIPELINE_CONFIG"
AWS_CONN_ENV = "TFOPT_AWS_CONN_ID"


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV, str(DEFAULT_CONFIG)))


def dag_config(params: dict[str, Any] | None = None,
               asset_extra: dict[str, Any] | None = None) -> PipelineConfig:
    """The DAG's YAML, then the asset event's extra, then ``dag_run.conf`` (the later wins, key
    by key): the event and the conf may set only what the YAML lets a trigger set."""
    triggers = [trigger_conf.event(asset_extra), trigger_conf.conf(params)]
    return load_config(config_path(), triggers=triggers if asset_extra or params else None)


def asset_event_extra(context: dict[str, Any]) -> dict[str, Any]:
    """The known keys of the extra of the latest asset event that triggered this run (the last
    one listed whose extra names any of them).

    A training job hands over its model by emitting the DAG's asset (``schedule.asset``) with
    ``extra={"source": "s3://.../model"}`` (and optionally ``evaluation_data``, ``overrides``),
    so one DAG serves every newly trained version. Unknown keys are ignored; the known ones are
    checked when the config is loaded (:func:`dag_config`). Kubernetes pods get the same from
    :data:`tfopt.components.orchestration.kubernetes_tasks.EVENT_TEMPLATE`.
    """
    latest: dict[str, Any] = {}
    for asset_events in (context.get("triggering_asset_events") or {}).values():
        for event in asset_events:
            extra = getattr(event, "extra", None)
            if isinstance(extra, dict):
                known = {k: extra[k] for k in ASSET_EXTRA_KEYS if extra.get(k)}
                latest = known or latest
    return latest


def run_context_of(context: dict[str, Any]) -> dict[str, Any]:
    """What publish records about the DAG run: ids and how it was triggered."""
    run_context = {"dag_id": context["dag"].dag_id, "dag_run_id": context["run_id"],
                   "task_id": context["ti"].task_id, "try_number": context["ti"].try_number}
    run_type = getattr(context.get("dag_run"), "run_type", None)
    if run_type is not None:
        run_context["run_type"] = str(getattr(run_type, "value", run_type))
    return run_context


def export_aws_connection(conn_id: str | None) -> None:
    """Credentials from an Airflow connection into boto3's environment, for this task only."""
    if not conn_id:
        return
    from airflow.sdk import BaseHook

    connection = BaseHook.get_connection(conn_id)
    if connection.login:
        os.environ["AWS_ACCESS_KEY_ID"] = connection.login
    if connection.password:
        os.environ["AWS_SECRET_ACCESS_KEY"] = connection.password
    extra = connection.extra_dejson or {}
    if extra.get("aws_session_token"):
        os.environ["AWS_SESSION_TOKEN"] = extra["aws_session_token"]
    if extra.get("region_name"):
        os.environ.setdefault("AWS_DEFAULT_REGION", extra["region_name"])


def in_process_tasks() -> dict[str, Any]:
    """Declare one TaskFlow task per step of the table, each fed the outputs (XComs) of the
    steps it needs, inside the DAG being defined; returns their outputs by step name."""
    from airflow.sdk import task

    from tfopt.components.pipeline.step_table import STEPS

    outputs: dict[str, Any] = {}
    for step in STEPS:
        run = task(task_id=step.name)(in_process_step)
        outputs[step.name] = run(step.name, {n: outputs[n] for n in step.needs})
    return outputs


def in_process_step(name: str, inputs: dict[str, Any], **context) -> dict[str, Any]:
    """What each in-process task runs: Airflow resolves ``inputs`` (the upstream XComs)."""
    return run_dag_step(name, inputs, context)


def run_dag_step(name: str, inputs: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """One in-process task: the step's small JSON output, which becomes the task's XCom."""
    import logging

    from tfopt.components.pipeline.step_runner import run_step

    logging.getLogger("components").setLevel(logging.INFO)
    logging.getLogger("optimizer").setLevel(logging.INFO)
    params = dict(context.get("params") or {})
    config = dag_config(params, asset_event_extra(context))
    export_aws_connection(os.environ.get(AWS_CONN_ENV))
    return run_step(name, config, inputs, run_context_of(context))


