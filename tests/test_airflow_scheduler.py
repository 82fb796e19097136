"""The DAG as a deployment runs it: a real scheduler starts runs from the cron and from the
asset event a training job posts, against a real ``mlflow server``.

A training job hands over a newly trained model by posting an event for the DAG's asset
(``schedule.asset``) with ``extra={"source": <the model's URI>}``; the scheduler's
``asset_triggered`` run takes that model, and a second event's model is judged against the
champion the first promoted (a LiteRT file here). Unpausing the DAG also starts the latest cron
interval's run, on the config's own source; it shares the work directory and the registry and
must succeed too. A last event that tries to send the worker's MLflow traffic elsewhere fails
its run at the first task (docs/triggers.md), and nothing reaches the other host.
"""

from __future__ import annotations

import contextlib
import threading

import pytest
from airflow_services import start_airflow

pytest_plugins = ["mlflow_server"]

DAG = "model_optimization"
ASSET = "tfopt://models/digits-cnn/trained"
RUN_SECONDS = 900


@pytest.fixture(scope="module")
def trained(tmp_path_factory, digits_model):
    from tfopt.components.demo.digits import train_digits_model

    second = train_digits_model(tmp_path_factory.mktemp("trained") / "v2", seed=1, epochs=8)
    return digits_model, second


def _mlflow_run(tracking_uri: str, dag_run_id: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("scheduler")
    runs = client.search_runs([experiment.experiment_id],
                              filter_string=f"tags.`tfopt.dag_run_id` = '{dag_run_id}'")
    assert len(runs) == 1, (dag_run_id, len(runs))
    return runs[0]


@pytest.mark.slow
def test_the_scheduler_runs_the_dag_from_a_training_jobs_asset_events(
        trained, mlflow_server, tmp_path):
    first, second = trained
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"source: {first.saved_model}\n"
        f"workdir: {tmp_path / 'work'}\n"
        f"evaluation: {{data: {first.eval_data}}}\n"
        "benchmark: {batch_sizes: [1], min_runs: 40, min_seconds: 1, warmup: 3}\n"
        "candidates: {targets: [savedmodel, litert], savedmodel_variants: [], "
        "litert_flavours: [dynamic_int8]}\n"
        "tuning: {enabled: false}\n"
        f"mlflow: {{tracking_uri: '{mlflow_server}', experiment: scheduler, "
        "registered_model: digits-scheduler}\n"
        f"schedule: {{cron: '0 3 * * *', asset: '{ASSET}', retries: 0}}\n")
    airflow = start_airflow(tmp_path / "airflow", config)
    try:
        airflow.wait_for("the DAG was not parsed",
                         lambda: airflow.request("GET", f"/api/v2/dags/{DAG}"), 300)
        airflow.request("PATCH", f"/api/v2/dags/{DAG}", {"is_paused": False})
        [asset] = airflow.request("GET", f"/api/v2/assets?uri_pattern={ASSET}")["assets"]

        def post_event(model) -> None:
            airflow.request("POST", "/api/v2/assets/events",
                            {"asset_id": asset["id"],
                             "extra": {"source": str(model.saved_model)}})

        def finished_asset_runs(count: int):
            def check():
                runs = [r for r in airflow.dag_runs(DAG) if r["run_type"] == "asset_triggered"]
                if len(runs) >= count and all(r["state"] in ("success", "failed")
                                              for r in runs):
                    return sorted(runs, key=lambda r: r["run_after"])
                return None
            return check

        post_event(first)
        runs = airflow.wait_for("the first asset-triggered run did not finish",
                                finished_asset_runs(1), RUN_SECONDS)
        assert [r["state"] for r in runs] == ["success"], airflow.logs()
        first_run = _mlflow_run(mlflow_server, runs[0]["dag_run_id"])
        assert first_run.data.tags["tfopt.source_uri"] == str(first.saved_model)
        assert first_run.data.tags["tfopt.run_type"] == "asset_triggered"

        post_event(second)
        runs = airflow.wait_for("the second asset-triggered run did not finish",
                                finished_asset_runs(2), RUN_SECONDS)
        assert [r["state"] for r in runs] == ["success", "success"], airflow.logs()
        second_run = _mlflow_run(mlflow_server, runs[1]["dag_run_id"])
        assert second_run.data.tags["tfopt.source_uri"] == str(second.saved_model)
        # Judged against what an earlier run promoted (the first event's run, or the cron run
        # before it), in that champion's own runtime.
        assert second_run.data.tags["tfopt.baseline_role"] == "champion"
        assert second_run.data.tags["tfopt.baseline_format"] == "tflite"

        def all_finished():
            runs = airflow.dag_runs(DAG)
            return runs if all(r["state"] in ("success", "failed") for r in runs) else None

        every_run = airflow.wait_for("the cron run did not finish", all_finished, RUN_SECONDS)
        assert {r["state"] for r in every_run} == {"success"}, airflow.logs()
        scheduled = [r for r in every_run if r["run_type"] == "scheduled"]
        for run in scheduled:
            assert _mlflow_run(mlflow_server, run["dag_run_id"]).data.tags[
                "tfopt.source_uri"] == str(first.saved_model)

        with _listener() as (elsewhere, requests):
            airflow.request("POST", "/api/v2/assets/events", {
                "asset_id": asset["id"],
                "extra": {"source": str(second.saved_model),
                          "overrides": {"mlflow.tracking_uri": elsewhere}}})
            runs = airflow.wait_for("the hostile event's run did not finish",
                                    finished_asset_runs(3), RUN_SECONDS)
            assert runs[-1]["state"] == "failed", airflow.logs()
            assert requests == []
        refusal = "asset event extra: 'mlflow.tracking_uri' can never come from a trigger"
        pull_logs = [log.read_text(errors="replace") for log in
                     (tmp_path / "airflow" / "logs").rglob("task_id=pull/*.log")]
        assert any(refusal in log for log in pull_logs), pull_logs[-1:]
    finally:
        airflow.stop()
    for name, process in airflow.processes.items():
        assert process.poll() is not None, f"airflow {name} still runs"


@contextlib.contextmanager
def _listener():
    """An HTTP server on a free loopback port: its URL, and the paths it was asked for."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    requests: list[str] = []

    class Record(BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            self.send_error(404)

        do_POST = do_GET

    server = ThreadingHTTPServer(("127.0.0.1", 0), Record)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
