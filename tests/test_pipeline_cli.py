"""tfopt run / tfopt step: the pipeline from the command line, on local files and sqlite MLflow."""

import json
from pathlib import Path

import pytest
from cli_testing import assert_chosen_is_the_fastest_or_a_more_precise_tie

from tfopt.components.cli import main
from tfopt.optimizer.model.savedmodel import list_signatures


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


def run_pipeline(tmp_path, capsys, source, registered_model: str, sections: str
                 ) -> tuple[int, dict]:
    """``tfopt run --json`` on ``source`` with the config ``sections`` (YAML lines); the exit
    code and the outcome."""
    config = tmp_path / f"{registered_model}.yaml"
    config.write_text(
        f"source: {source}\nworkdir: {tmp_path / 'work'}\n{sections}"
        f"mlflow: {{tracking_uri: 'sqlite:///{tmp_path / 'mlflow.db'}', experiment: cli, "
        f"registered_model: {registered_model}}}\n")
    code = main(["run", "--config", str(config), "--run-id", f"{registered_model}-1", "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_with_litert_allowed_the_registry_version_says_its_format_and_how_to_run_it(
        tmp_path, capsys, digits_model):
    digits = digits_model
    code, outcome = run_pipeline(
        tmp_path, capsys, digits.saved_model, "digits",
        f"evaluation: {{data: {digits.eval_data}}}\n"
        "benchmark: {batch_sizes: [1], min_runs: 30, min_seconds: 1, warmup: 3}\n"
        "gate: {max_accuracy_drop_abs: 0.005}\n"
        "candidates: {targets: [savedmodel, litert], savedmodel_variants: []}\n"
        "tuning: {rounds: 3, seconds_per_probe: 0.2, time_budget_seconds: 5}\n")
    assert code == 0
    labels = [c["label"] for c in outcome["candidates"]]
    assert labels == ["frozen", "optimized", "litert_fp32", "litert_fp16",
                      "litert_dynamic_int8", "litert_full_int8"]
    chosen = outcome["gate"]["chosen"]
    assert chosen.startswith("litert_")  # ~10x on this model, at the same held-out accuracy
    report = json.loads((Path(outcome["gate"]["report_dir"]) / "report.json").read_text())
    rows = {r["label"]: r for r in report["candidates"]}
    assert_chosen_is_the_fastest_or_a_more_precise_tie(rows, chosen)
    assert (Path(outcome["gate"]["report_dir"]) / "pareto.png").stat().st_size > 0
    # tuning's cost is a row of the report's step costs, and of the run's
    assert report["step_costs"]["gate.tune"]["peak_rss_bytes"] > 0
    assert "| gate.tune |" in (Path(outcome["gate"]["report_dir"]) / "report.md").read_text()
    assert outcome["costs"]["gate.tune"] == report["step_costs"]["gate.tune"]
    # The gate's table says what each candidate is as the optimize step tagged it.
    for candidate in outcome["candidates"]:
        row = rows[candidate["label"]]
        assert candidate["how_to_load"] and row["how_to_load"] == candidate["how_to_load"]
        for key in ("target", "variant", "format", "runtime", "calibration"):
            assert row[key] == candidate[key], (candidate["label"], key)
    # no calibration.data: full int8 calibrated on the eval data's inputs
    assert {r["label"]: r["calibration"] for r in rows.values() if r["calibration"]} == {
        "litert_full_int8": "data"}

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    version = client.get_model_version("digits", outcome["publish"]["version"])
    assert version.tags["tfopt.format"] == "tflite"
    assert version.tags["tfopt.runtime"] == "ai-edge-litert"
    assert "Interpreter(model_path='model.tflite'" in version.tags["tfopt.load"]
    threads = int(version.tags["tfopt.runtime.num_threads"])
    assert threads >= 1
    # the load line a person reads and the tag both carry the tuned thread count
    assert f"num_threads={threads})" in version.tags["tfopt.load"]
    assert f"(tuned: num_threads={threads})" in version.description
    assert f"num_threads={threads})" in version.description
    markdown = (Path(outcome["gate"]["report_dir"]) / "report.md").read_text()
    assert markdown.startswith("# digits: optimization report")
    assert f"num_threads={threads})" in markdown.split("## What to do next")[1]
    metrics = client.get_run(version.run_id).data.metrics
    assert metrics["step.gate.tune.peak_rss_bytes"] == report["step_costs"]["gate.tune"][
        "peak_rss_bytes"]
    # The version is an MLflow Model: the LiteRT file and sidecar, the loader shipped with
    # them, the tuned settings; its thread count is what the pyfunc loader runs with.
    model_id = outcome["publish"]["logged_models"][chosen]
    files = {a.path for a in client.list_logged_model_artifacts(model_id)}
    assert {"MLmodel", "litert", "code", "runtime_settings.json", "requirements.txt"} <= files
    assert {a.path for a in client.list_logged_model_artifacts(model_id, "litert")} == {
        "litert/model.tflite", "litert/model.tflite.json"}
    assert version.source == client.get_logged_model(model_id).artifact_location


def test_without_any_data_full_int8_calibrates_on_generated_inputs_and_says_so_up_to_the_registry(
        model_dir, tmp_path, capsys, monkeypatch):
    code, outcome = run_pipeline(
        tmp_path, capsys, model_dir("keras_cnn"), "synthetic",
        "benchmark: {batch_sizes: [1], min_runs: 20, min_seconds: 0.5, warmup: 3}\n"
        # agreement with the input on generated inputs is what it is: the tags are on trial
        "gate: {max_accuracy_drop_abs: 1.0}\n"
        "candidates: {targets: [litert], litert_flavours: [full_int8]}\n"
        "tuning: {enabled: false}\n")
    assert code == 0
    assert {c["label"]: c["calibration"] for c in outcome["candidates"]} == {
        "frozen": None, "optimized": None, "litert_full_int8": "synthetic"}
    assert outcome["gate"]["chosen"] == "litert_full_int8"  # ~50x the SavedModel's speed
    report_dir = Path(outcome["gate"]["report_dir"])
    rows = {r["label"]: r for r in json.loads((report_dir / "report.json").read_text())[
        "candidates"]}
    assert rows["litert_full_int8"]["calibration"] == "synthetic"
    assert rows["optimized"]["calibration"] is None
    table = (report_dir / "report.md").read_text()
    assert "| calibration |" in table
    assert next(line for line in table.splitlines()
                if line.startswith("| litert_full_int8 | tflite")).split(" | ")[3] == "synthetic"

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    version = client.get_model_version("synthetic", outcome["publish"]["version"])
    assert version.tags["tfopt.calibration"] == "synthetic"
    assert client.get_run(version.run_id).data.tags["tfopt.calibration"] == "synthetic"
    import mlflow.artifacts

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    model = mlflow.artifacts.download_artifacts(
        artifact_uri=f"models:/synthetic/{version.version}", dst_path=str(tmp_path / "version"))
    sidecar = Path(model) / "litert" / "model.tflite.json"
    assert json.loads(sidecar.read_text())["calibration_source"] == "synthetic"


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


def test_labels_that_do_not_fit_the_model_stop_the_run_at_freeze(local_config, tmp_path, capsys):
    import numpy as np

    from tfopt.optimizer.model.savedmodel import get_signature

    assert main(["step", "pull", "--config", str(local_config)]) == 0
    pulled = json.loads(capsys.readouterr().out)
    image = get_signature(pulled["path"]).inputs[0].shape[1:]
    per_pixel = tmp_path / "per_pixel.npz"
    np.savez(per_pixel, x=np.zeros((4, *image), np.float32), y=np.zeros((4, 7), np.int64))
    conf = json.dumps({"overrides": {"evaluation.data": str(per_pixel)}})
    out_file = tmp_path / "freeze.json"
    code = main(["step", "freeze", "--config", str(local_config), "--conf", conf,
                 "--inputs", json.dumps({"pull": pulled}), "--output", str(out_file)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{per_pixel}: the labels (y of shape (4, 7)) do not fit the model's output" in err
    assert "for metric top1: it scores 1 label(s) per row, y has 7" in err
    assert not out_file.exists()


def test_a_step_without_the_outputs_it_needs_is_a_clear_error(local_config, capsys):
    assert main(["step", "benchmark", "--config", str(local_config)]) == 2
    assert "needs the outputs of: pull, freeze, optimize" in capsys.readouterr().err


def test_conf_overrides_apply_like_a_dag_trigger_where_the_yaml_allows(local_config, capsys):
    conf = json.dumps({"overrides": {"optimize.recipe": "no_such_transform"}})
    assert main(["step", "pull", "--config", str(local_config)]) == 0
    pulled = json.loads(capsys.readouterr().out)
    optimize = ["step", "optimize", "--config", str(local_config), "--conf", conf,
                "--inputs", json.dumps({"pull": pulled})]
    assert main(optimize) == 2
    assert "'optimize.recipe' may not come from a trigger" in capsys.readouterr().err
    local_config.write_text(local_config.read_text()
                            + "triggers: {allow_overrides: [optimize.recipe]}\n")
    assert main(optimize) == 2
    assert "unknown transform 'no_such_transform'" in capsys.readouterr().err


def test_airflow_connection_credentials_reach_boto3_environment(monkeypatch):
    from tfopt.components.orchestration.airflow_tasks import export_aws_connection

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
