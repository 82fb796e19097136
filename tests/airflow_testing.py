"""Run Airflow for tests: a private AIRFLOW_HOME, and DagBag parsed in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "dags"

_PARSE_SCRIPT = r"""
import json, sys, time
import airflow.sdk  # the scheduler has Airflow loaded before it parses a DAG file
from airflow.dag_processing.dagbag import DagBag
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
wall = time.perf_counter() - started
out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()},
       "dags": sorted(bag.dags), "wall_seconds": wall,
       "file_seconds": {s.file: s.duration.total_seconds() for s in bag.dagbag_stats},
       "heavy_modules": sorted(m for m in sys.modules
                               if m.split(".")[0] in ("tensorflow", "keras", "mlflow"))}
dag = bag.dags.get("model_optimization")
if dag is not None:
    out["tasks"] = {t.task_id: {"upstream": sorted(t.upstream_task_ids),
                                "retries": t.retries,
                                "exponential": bool(t.retry_exponential_backoff),
                                "timeout_seconds": (t.execution_timeout.total_seconds()
                                                    if t.execution_timeout else None),
                                "type": type(t).__name__}
                    for t in dag.tasks}
    out["catchup"] = dag.catchup
    out["tags"] = sorted(dag.tags)
    out["doc"] = bool(dag.doc_md)
    out["timetable"] = type(dag.timetable).__name__
    out["params"] = {k: dag.params.get_param(k).schema for k in dag.params}
    if len(sys.argv) > 2:
        op = dag.get_task(sys.argv[2])
        pod = op.build_pod_request_obj(dry_run=True)
        c = pod.spec.containers[0]
        out["pod"] = {"image": c.image, "command": c.command, "args": c.args,
                      "resources": {"requests": c.resources.requests,
                                    "limits": c.resources.limits},
                      "node_selector": pod.spec.node_selector,
                      "volumes": [v.name for v in pod.spec.volumes or []]}
    if len(sys.argv) > 3:
        # Each pod's memory as its operator renders it, for each given pull output (XCom).
        import copy
        out["memory"] = {}
        for label, pulled in json.loads(sys.argv[3]).items():
            class PulledXCom:
                def xcom_pull(self, task_ids):
                    assert task_ids == "pull", task_ids
                    return pulled
            out["memory"][label] = {}
            for t in dag.tasks:
                resources = t.render_template(copy.deepcopy(t.container_resources),
                                              {"ti": PulledXCom()}, dag.get_template_env())
                out["memory"][label][t.task_id] = {"request": resources.requests["memory"],
                                                   "limit": resources.limits["memory"]}
    if len(sys.argv) > 4:
        # The render task's arguments as its pod gets them for each given trigger: the run's
        # dag_run.conf and the extras of the asset events that started it, in order.
        from types import SimpleNamespace
        class UpstreamXCom:
            def xcom_pull(self, task_ids):
                return {"step": task_ids}
        op = dag.get_task(sys.argv[2])
        out["rendered_args"] = {}
        for label, trigger in json.loads(sys.argv[4]).items():
            context = {"ti": UpstreamXCom(), "run_id": "asset_triggered__1",
                       "dag_run": SimpleNamespace(conf=trigger["conf"]),
                       "triggering_asset_events": {
                           "tfopt://models/trained": [SimpleNamespace(extra=extra)
                                                      for extra in trigger["events"]]}}
            out["rendered_args"][label] = op.render_template(list(op.arguments), context,
                                                             dag.get_template_env())
print("RESULT " + json.dumps(out))
"""


def airflow_env(home: Path, config: Path | None = None) -> dict[str, str]:
    env = {**os.environ,
           "AIRFLOW_HOME": str(home),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
           "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    if config is not None:
        env["TFOPT_PIPELINE_CONFIG"] = str(config)
    return env


def parse_dags(home: Path, config: Path | None = None, render_task: str | None = None,
               pull_outputs: dict[str, dict] | None = None,
               triggers: dict[str, dict] | None = None) -> dict:
    """The DAG as Airflow parses it; with ``render_task``, that task's pod; with
    ``pull_outputs`` ({label: a pull's output}) too, every pod's memory as rendered for each;
    with ``triggers`` too ({label: {"conf": dag_run.conf, "events": [an asset event's extra,
    ...]}}), the render task's arguments as rendered for each (``rendered_args``)."""
    args = [sys.executable, "-c", _PARSE_SCRIPT, str(DAGS)] + ([render_task] if render_task
                                                                else [])
    if pull_outputs is not None:
        args.append(json.dumps(pull_outputs))
    if triggers is not None:
        args.append(json.dumps(triggers))
    done = subprocess.run(args, check=False, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=airflow_env(home, config))
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])
