"""End to end, through ``tfopt run`` against a real ``mlflow server``: a run's candidates must
be as accurate as the champion they would replace, and a model that answers NaN is refused.

The champion is the digits CNN (top-1 ~0.98 on its held-out data), registered the way a team
bootstraps the registry with the model it serves. The next runs' sources have its signature
(tests/model_zoo.py): a constant model (always class 0, top-1 ~0.1, and far faster), whose
candidates are as good as their own input, so that only the comparison with the champion can
stop them; and a model whose every output is NaN, refused at freeze before any work. The alias
stays on the champion.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_testing import assert_clean_failure, run_tfopt
from mlflow import MlflowClient
from test_champion import register

pytest_plugins = ["mlflow_server"]

NAME = "digits-guarded"


@pytest.fixture(scope="module")
def registry(mlflow_server, digits_model, model_dir):
    """The digits CNN registered as version 1 with the alias ``champion``."""
    client = MlflowClient(mlflow_server, registry_uri=mlflow_server)
    register(client, NAME, digits_model.saved_model, alias="champion")
    return client, model_dir("constant_classifier"), model_dir("nan_classifier")


def _config(tmp_path: Path, tracking_uri: str, eval_data: Path) -> Path:
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "source: unused\n"
        f"workdir: {tmp_path / 'work'}\n"
        f"evaluation: {{data: {eval_data}}}\n"
        "candidates: {targets: [savedmodel], savedmodel_variants: []}\n"
        "benchmark: {batch_sizes: [1], min_runs: 30, min_seconds: 0.5, warmup: 3}\n"
        "tuning: {enabled: false}\n"
        f"mlflow: {{tracking_uri: '{tracking_uri}', experiment: guarded, "
        f"registered_model: {NAME}}}\n")
    return config


def _state(client: MlflowClient) -> tuple[list[str], str]:
    versions = sorted(v.version for v in client.search_model_versions(f"name = '{NAME}'"))
    return versions, client.get_registered_model(NAME).aliases["champion"]


@pytest.mark.slow  # two minutes on a loaded 2-core machine: a whole run, TF started once
def test_a_constant_model_is_rejected_against_an_accurate_champion_and_the_alias_stays(
        registry, mlflow_server, digits_model, tmp_path):
    client, constant, _ = registry
    config = _config(tmp_path, mlflow_server, digits_model.eval_data)

    done = run_tfopt("run", "--config", config, "--set", f"source={constant}",
                     "--run-id", "constant-1", "--json", timeout=900)

    assert done.returncode == 3, done.stderr[-3000:]
    assert _state(client) == (["1"], "1")
    [verdict_file] = (tmp_path / "work").glob("runs/*/gate-*/verdict.json")
    decision = json.loads(verdict_file.read_text())
    assert decision["promote"] is False
    for verdict in decision["verdicts"]:
        checks = {c["name"]: c for c in verdict["checks"]}
        assert verdict["baseline"] == "champion-v1"
        assert checks["accuracy_drop_abs"]["passed"]  # as good as its own input...
        assert not checks["champion_accuracy_drop_abs"]["passed"]  # ...far worse than v1
        assert checks["champion_accuracy_drop_abs"]["measured"] > 0.8
    assert "accuracy against champion-v1 (the champion: top1 on labelled data" in (
        decision["comparisons"])
    [report] = (tmp_path / "work").glob("runs/*/gate-*/report/report.md")
    assert "Compared: latency against champion-v1 (champion)" in report.read_text()
    [run] = client.search_runs([client.get_experiment_by_name("guarded").experiment_id],
                               filter_string="tags.`tfopt.dag_run_id` = 'constant-1'")
    assert run.data.tags["tfopt.verdict"] == "reject"
    assert "worse than the champion" in run.data.tags["tfopt.gate_summary"]


def test_a_model_answering_nan_is_refused_before_any_work_and_the_alias_stays(
        registry, mlflow_server, digits_model, tmp_path):
    client, _, nan = registry
    config = _config(tmp_path, mlflow_server, digits_model.eval_data)

    done = run_tfopt("run", "--config", config, "--set", f"source={nan}", "--run-id", "nan-1",
                     timeout=600)

    assert_clean_failure(done, 2, f"{nan}: its outputs hold 4500 NaN values on the "
                                  f"evaluation data {digits_model.eval_data}")
    assert _state(client) == (["1"], "1")
    assert not list((tmp_path / "work").glob("runs/*/optimize-*"))
