"""What a DAG run takes from its trigger: the YAML, then the asset event's extra, then conf."""

from types import SimpleNamespace

import pytest

from components.orchestration import asset_event_extra, dag_config, run_context_of


@pytest.fixture
def dag_yaml(tmp_path, monkeypatch):
    path = tmp_path / "pipeline.yaml"
    path.write_text("source: s3://models/digits/v1\n"
                    "evaluation: {data: s3://models/digits/eval.npz}\n"
                    "gate: {min_speedup: 1.05}\n")
    monkeypatch.setenv("TFOPT_PIPELINE_CONFIG", str(path))
    return path


def _event(**extra):
    return SimpleNamespace(extra=extra)


def test_an_asset_event_names_the_model_and_its_data(dag_yaml):
    context = {"triggering_asset_events": {"tfopt://models/digits/trained": [
        _event(source="s3://models/digits/v7", evaluation_data="s3://models/digits/v7.npz",
               overrides={"gate.min_speedup": 1.2}, trained_by="job-42")]}}

    extra = asset_event_extra(context)
    config = dag_config({}, extra)

    assert extra == {"source": "s3://models/digits/v7",
                     "evaluation_data": "s3://models/digits/v7.npz",
                     "overrides": {"gate.min_speedup": 1.2}}  # unknown keys are left out
    assert config.source == "s3://models/digits/v7"
    assert config.evaluation.data == "s3://models/digits/v7.npz"
    assert config.gate.min_speedup == 1.2


def test_the_latest_event_wins_and_conf_wins_over_it_key_by_key(dag_yaml):
    context = {"triggering_asset_events": {"tfopt://models/digits/trained": [
        _event(source="s3://models/digits/v6"),
        _event(source="s3://models/digits/v7", overrides={"gate.min_speedup": 1.2})]}}

    config = dag_config({"overrides": {"gate.min_speedup": 1.5}}, asset_event_extra(context))

    assert config.source == "s3://models/digits/v7"
    assert config.gate.min_speedup == 1.5
    assert dag_config({"source": "models:/digits@candidate"},
                      asset_event_extra(context)).source == "models:/digits@candidate"


def test_without_an_event_the_yaml_stands(dag_yaml):
    assert asset_event_extra({}) == {}
    assert dag_config({}, {}).source == "s3://models/digits/v1"


def test_the_run_context_says_how_the_run_was_started():
    context = {"dag": SimpleNamespace(dag_id="model_optimization"), "run_id": "asset__1",
               "ti": SimpleNamespace(task_id="pull", try_number=1),
               "dag_run": SimpleNamespace(run_type=SimpleNamespace(value="asset_triggered"))}

    assert run_context_of(context) == {"dag_id": "model_optimization", "dag_run_id": "asset__1",
                                       "task_id": "pull", "try_number": 1,
                                       "run_type": "asset_triggered"}
