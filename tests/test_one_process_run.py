"""``tfopt run`` in one process, twice on one registry: what it records and says is what happened.

The real console script against a real ``mlflow server``. The first run promotes a LiteRT
candidate of the CNN; its benchmark ran with the thread settings it records, although the
steps before it started TensorFlow in the same process. The second run, without ``--run-id``,
judges the same source against that champion and rejects it: it logs a run of its own for the
rejection, and says nothing moved.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_testing import run_tfopt

pytest_plugins = ["mlflow_server"]

NAME = "cnn-twice"


@pytest.fixture(scope="module")
def two_runs(model_dir, mlflow_server, tmp_path_factory):
    """The config, and the first and second ``tfopt run`` (the completed processes)."""
    root = tmp_path_factory.mktemp("one_process_run")
    config = root / "pipeline.yaml"
    config.write_text(
        f"source: {model_dir('keras_cnn')}\n"
        f"workdir: {root / 'work'}\n"
        "benchmark: {batch_sizes: [1], min_runs: 20, min_seconds: 0.5, warmup: 3}\n"
        "candidates: {targets: [litert], litert_flavours: [fp32]}\n"
        "tuning: {enabled: false}\n"
        f"mlflow: {{tracking_uri: '{mlflow_server}', experiment: twice, "
        f"registered_model: {NAME}}}\n")
    first = run_tfopt("run", "--config", config)
    second = run_tfopt("run", "--config", config)
    return first, second


def _runs(tracking_uri: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("twice").experiment_id
    return client, client.search_runs([experiment], order_by=["attributes.start_time ASC"])


@pytest.mark.slow  # the fixture: a server and two whole runs
def test_the_benchmark_of_a_one_process_run_runs_with_the_threads_it_records(
        two_runs, mlflow_server):
    first, _ = two_runs
    assert first.returncode == 0, first.stderr[-2000:]
    assert "initialised before the settings were applied" not in first.stderr
    _, runs = _runs(mlflow_server)
    tags = runs[0].data.tags
    assert tags["tfopt.verdict"] == "promote"
    assert tags["env.thread_settings_in_effect"] == "true"
    assert int(tags["env.intra_op_threads"]) >= 1 and tags["env.inter_op_threads"] == "1"


@pytest.mark.slow
def test_a_rerun_after_a_promotion_logs_its_rejection_and_claims_no_alias_move(
        two_runs, mlflow_server):
    first, second = two_runs
    assert first.returncode == 0, first.stderr[-2000:]
    assert "alias 'champion' moved to v1" in first.stdout
    assert second.returncode == 3, second.stderr[-2000:]
    assert "verdict      reject" in second.stdout
    assert "moved" not in second.stdout, second.stdout
    client, runs = _runs(mlflow_server)
    assert [r.data.tags["tfopt.verdict"] for r in runs] == ["promote", "reject"]
    rejection = runs[1].data.tags
    assert rejection["tfopt.alias_moved"] == "false"
    assert rejection["tfopt.baseline_role"] == "champion"
    assert f"run {runs[1].info.run_id}" in second.stdout
    assert [v.version for v in client.search_model_versions(f"name = '{NAME}'")] == ["1"]
    assert client.get_registered_model(NAME).aliases == {"champion": "1"}


def test_a_step_after_tensorflow_started_benchmarks_in_a_process_with_the_threads_it_records(
        model_dir, tmp_path, caplog):
    # As in Airflow's in-process tasks (the demo's ``airflow dags test``) and in this test
    # process: TensorFlow's pools were sized before the benchmark step, by other work.
    import json
    import logging

    import tensorflow as tf

    from tfopt.components.config.pipeline_config import config_from_mapping
    from tfopt.components.pipeline.run import run_pipeline

    tf.constant(1.0) + 1.0
    config = config_from_mapping({
        "source": str(model_dir("keras_cnn")), "workdir": str(tmp_path / "work"),
        "benchmark": {"batch_sizes": [1], "min_runs": 10, "min_seconds": 0.2, "warmup": 2,
                      "threads": tf.config.threading.get_intra_op_parallelism_threads() + 1},
        "candidates": {"targets": ["savedmodel"], "savedmodel_variants": []},
        "tuning": {"enabled": False}})
    with caplog.at_level(logging.INFO):
        outcome = run_pipeline(config, publish_results=False)
    result = json.loads(Path(outcome.benchmark.result_path).read_text())
    runtime = result["environment"]["runtime"]
    assert runtime["settings_in_effect"] is True
    assert (runtime["intra_op_threads"], runtime["inter_op_threads"]) == (
        config.benchmark.threads, 1)
    assert "initialised before the settings were applied" not in caplog.text
    assert "started with the thread settings" in caplog.text
