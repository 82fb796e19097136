"""model_optimization: make the latest trained SavedModel faster, and promote it only on evidence.

Triggers: the cron in the DAG's config; an event on the trained-model asset (``schedule.asset``)
that a training job posts, whose extra names the model (``{"source": "s3://..."}``, optionally
``evaluation_data`` and ``overrides``); or a manual/API trigger whose ``dag_run.conf`` may set
``source`` and dotted ``overrides`` (conf wins over the event, the event over the YAML).

Trust boundary (docs/triggers.md): whoever posts an event or a conf is not the operator. A
trigger may set only ``source``, ``evaluation.data`` and the keys the YAML lists in
``triggers.allow_overrides``; ``security``, ``mlflow``, ``s3``, ``workdir`` and ``resources``
never. Its shape and sizes are checked, YAML anchors in its values refused; anything else fails
the task in one line naming the key (a config error, exit 2), before any model work. In
Kubernetes mode the pods get the event's extra and the conf, and check them the same way.

Steps (components/pipeline/step_table.py): pull -> freeze, optimize (and its candidates) -> benchmark
(baseline and candidates in one task, on one node) -> evaluate -> gate (report, tuning) ->
publish (MLflow run, registered version, alias moved only on a pass).
Each task is idempotent, so retries reuse finished work. Tasks run in-process, or, with
``execution.mode: kubernetes``, as ``tfopt step`` pods in the project image.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Asset, Param, dag

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.orchestration.airflow_tasks import (
    PARAMS_SCHEMA,
    config_path,
    dag_config,
    in_process_tasks,
)

CONFIG: PipelineConfig = dag_config()


def _schedule(config: PipelineConfig):
    cron, asset = config.schedule.cron, config.schedule.asset
    if cron and asset:
        from airflow.timetables.assets import AssetOrTimeSchedule
        from airflow.timetables.trigger import CronTriggerTimetable

        return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"),
                                   assets=[Asset(asset)])
    if asset:
        return [Asset(asset)]
    return cron


@dag(
    dag_id="model_optimization",
    schedule=_schedule(CONFIG),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["mlops", "tensorflow", "optimization"],
    doc_md=__doc__,
    default_args={
        "retries": CONFIG.schedule.retries,
        "retry_delay": timedelta(seconds=CONFIG.schedule.retry_delay_seconds),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=30),
        # one run at a time (max_active_runs): a task that never ends would hold every later
        # run; a model call that never returns is stopped sooner, by its own deadline
        "execution_timeout": timedelta(minutes=CONFIG.resources.task_timeout_minutes),
    },
    params={name: Param(None if name == "source" else {}, **schema)
            for name, schema in PARAMS_SCHEMA.items()},
)
def model_optimization():
    # One task per step of components/pipeline/step_table.py, wired by what each step reads.
    if CONFIG.execution.mode == "kubernetes":
        from tfopt.components.orchestration.kubernetes_tasks import step_operators

        step_operators(CONFIG, str(config_path()))
    else:
        in_process_tasks()


model_optimization()
