"""tfopt run / tfopt step: the pipeline from the command line, on local files and sqlite MLflow."""

import json
from pathlib import Path

import pytest

from components.cli import main
from optimizer.savedmodel import list_signatures


@pytest.fixture
def local_config(tmp_path, model_dir):
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"source: {model_dir('keras_cnn')}\n"
        f"workdir: {tmp_path / 'work'}\n"
        "benchmark: {batch_sizes: [1], min_runs: 30, min_seconds: 0.5, warmup: 3}\n"
        "tuning: {enabled: false}\n"
        f"mlflow: {{tracking_uri: 'sqlite:///{tmp_path / 'mlflow.db'}', experiment: cli, "
        "registered_model: cnn}\n")
    return config


def test_with_litert_allowed_the_registry_version_says_its_format_and_how_to_run_it(
        tmp_path, capsys):
    from components.digits import train_digits_model

    digits = train_digits_model(tmp_path / "digits", epochs=8)
    config = tmp_path / "litert.yaml"
    config.write_text(
        f"source: {digits.saved_model}\n"
        f"workdir: {tmp_path / 'work'}\n"
        f"evaluation: {{data: {digits.eval_data}}}\n"
        "benchmark: {batch_sizes: [1], min_runs: 30, min_seconds: 1, warmup: 3}\n"
        "gate: {max_accuracy_drop_abs: 0.005}\n"
        "candidates: {targets: [savedmodel, litert], savedmodel_variants: []}\n"
        "tuning: {rounds: 3, seconds_per_probe: 0.2, time_budget_seconds: 5}\n"
        f"mlflow: {{tracking_uri: 'sqlite:///{tmp_path / 'mlflow.db'}', experiment: cli, "
        "registered_model: digits}\n")
    code = main(["run", "--config", str(config), "--run-id", "litert-1", "--json"])
    outcome = json.loads(capsys.readouterr().out)
    assert code == 0
    labels = [c["label"] for c in outcome["candidates"]]
    assert labels == ["frozen", "optimized", "litert_fp32", "litert_fp16",
                      "litert_dynamic_int8", "litert_full_int8"]
    chosen = outcome["gate"]["chosen"]
    assert chosen.startswith("litert_")  # ~10x on this model, at the same held-out accuracy
    report = json.loads((Path(outcome["gate"]["report_dir"]) / "report.json").read_text())
    rows = {r["label"]: r for r in report["candidates"]}
    assert rows[chosen]["speedup"] == max(r["speedup"] for r in rows.values()
                                          if r["verdict"] in ("chosen", "passed"))
    assert (Path(outcome["gate"]["report_dir"]) / "pareto.png").stat().st_size > 0
    # The gate's table says what each candidate is as the optimize step tagged it.
    for candidate in outcome["candidates"]:
        row = rows[candidate["label"]]
        assert candidate["how_to_load"] and row["how_to_load"] == candidate["how_to_load"]
        for key in ("target", "variant", "format", "runtime"):
            assert row[key] == candidate[key], (candidate["label"], key)

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    version = client.get_model_version("digits", outcome["publish"]["version"])
    assert version.tags["tfopt.format"] == "tflite"
    assert version.tags["tfopt.runtime"] == "ai-edge-litert"
    assert "Interpreter(model_path='model.tflite'" in version.tags["tfopt.load"]
    assert int(version.tags["tfopt.runtime.num_threads"]) >= 1
    # The version is an MLflow Model: the LiteRT file and sidecar, the loader shipped with
    # them, the tuned settings; its thread count is what the pyfunc loader runs with.
    model_id = outcome["publish"]["logged_models"][chosen]
    files = {a.path for a in client.list_logged_model_artifacts(model_id)}
    assert {"MLmodel", "litert", "code", "runtime_settings.json", "requirements.txt"} <= files
    assert {a.path for a in client.list_logged_model_artifacts(model_id, "litert")} == {
        "litert/model.tflite", "litert/model.tflite.json"}
    assert version.source == client.get_logged_model(model_id).artifact_location


def test_run_executes_every_step_and_reports_the_verdict(local_config, tmp_path, capsys):
    code = main(["run", "--config", str(local_config), "--run-id", "ci-1"])
    captured = capsys.readouterr()
    out = captured.out
    assert code in (0, 3), captured.err
    verdict = next(line for line in out.splitlines() if line.startswith("verdict"))
    assert ("promote" in verdict) == (code == 0)
    assert "report.md" in out and "mlflow       run" in out

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("cli").experiment_id])
    assert [r.data.tags["tfopt.dag_run_id"] for r in runs] == ["ci-1"]


def test_steps_chain_through_their_json_outputs(local_config, tmp_path, capsys):
    assert main(["step", "pull", "--config", str(local_config)]) == 0
    pulled = json.loads(capsys.readouterr().out)
    out_file = tmp_path / "freeze.json"
    assert main(["step", "freeze", "--config", str(local_config),
                 "--inputs", json.dumps({"pull": pulled}), "--output", str(out_file)]) == 0
    frozen = json.loads(out_file.read_text())
    assert json.loads(capsys.readouterr().out) == frozen
    assert frozen["kind"] == "frozen"
    assert list(list_signatures(frozen["path"])) == ["serving_default"]
    assert frozen["equivalence"]["max_abs_diff"] <= 1e-4


def test_a_step_without_the_outputs_it_needs_is_a_clear_error(local_config, capsys):
    assert main(["step", "benchmark", "--config", str(local_config)]) == 2
    assert "needs the outputs of: pull, freeze, optimize" in capsys.readouterr().err


def test_conf_overrides_apply_like_a_dag_trigger(local_config, capsys):
    conf = json.dumps({"overrides": {"optimize.recipe": "no_such_transform"}})
    assert main(["step", "pull", "--config", str(local_config)]) == 0
    pulled = json.loads(capsys.readouterr().out)
    code = main(["step", "optimize", "--config", str(local_config), "--conf", conf,
                 "--inputs", json.dumps({"pull": pulled})])
    assert code == 2
    assert "unknown transform 'no_such_transform'" in capsys.readouterr().err


def test_airflow_connection_credentials_reach_boto3_environment(monkeypatch):
    from components.orchestration import export_aws_connection

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_MODELS_AWS", json.dumps({
        "conn_type": "aws", "login": "AKIAEXAMPLE", "password": "s3cret",
        "extra": {"region_name": "eu-west-1", "aws_session_token": "tok"}}))
    export_aws_connection("models_aws")
    import os

    assert (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
            os.environ["AWS_SESSION_TOKEN"], os.environ["AWS_DEFAULT_REGION"]) == (
        "AKIAEXAMPLE", "s3cret", "tok", "eu-west-1")
