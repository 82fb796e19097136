"""What a run takes from its trigger: the YAML, then the asset event's extra, then conf, and
only what the YAML lets a trigger set (components/config/trigger_conf.py, docs/triggers.md).

Each hostile case goes through the entry points a poster reaches: the DAG's own config
functions for an asset event and a ``dag_run.conf``, and ``tfopt run --conf`` (which stands for
a trigger's conf on the command line). Kubernetes pods: tests/test_dag.py.
"""

import argparse
import json
import os
import resource
import subprocess
import time
from types import SimpleNamespace

import pytest
from cli_testing import TFOPT, assert_clean_failure, run_tfopt
from fuzzing import alias_bomb

from tfopt.components.cli.run_command import load_config_from_args
from tfopt.components.config.pipeline_config import NEVER_FROM_A_TRIGGER, ConfigError, load_config
from tfopt.components.config.trigger_conf import MAX_OVERRIDES, MAX_TRIGGER_CHARS, MAX_VALUE_CHARS
from tfopt.components.orchestration.airflow_tasks import (
    asset_event_extra,
    dag_config,
    run_context_of,
)

ASSET = "tfopt://models/digits/trained"


DAG_YAML = ("source: s3://models/digits/v1\n"
            "evaluation: {data: s3://models/digits/eval.npz}\n"
            "gate: {min_speedup: 1.05}\n")


@pytest.fixture
def dag_yaml(tmp_path, monkeypatch):
    """The DAG's YAML, allowing triggers nothing beyond the defaults."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(DAG_YAML)
    monkeypatch.setenv("TFOPT_PIPELINE_CONFIG", str(path))
    return path


@pytest.fixture
def allowing_yaml(dag_yaml):
    """The DAG's YAML, letting a trigger set ``gate.min_speedup`` too."""
    dag_yaml.write_text(DAG_YAML + "triggers: {allow_overrides: [gate.min_speedup]}\n")
    return dag_yaml


def _event(**extra):
    return SimpleNamespace(extra=extra)


def _events(*events) -> dict:
    return {"triggering_asset_events": {ASSET: list(events)}}


def test_an_asset_event_names_the_model_and_its_data(allowing_yaml):
    context = _events(_event(source="s3://models/digits/v7",
                             evaluation_data="s3://models/digits/v7.npz",
                             overrides={"gate.min_speedup": 1.2}, trained_by="job-42"))

    extra = asset_event_extra(context)
    config = dag_config({}, extra)

    assert extra == {"source": "s3://models/digits/v7",
                     "evaluation_data": "s3://models/digits/v7.npz",
                     "overrides": {"gate.min_speedup": 1.2}}  # unknown keys are left out
    assert config.source == "s3://models/digits/v7"
    assert config.evaluation.data == "s3://models/digits/v7.npz"
    assert config.gate.min_speedup == 1.2  # the YAML allows it


def test_the_latest_event_wins_and_conf_wins_over_it_key_by_key(allowing_yaml):
    context = _events(_event(source="s3://models/digits/v6"),
                      _event(source="s3://models/digits/v7", overrides={"gate.min_speedup": 1.2}),
                      _event(trained_by="job-43"))  # names no model: not the latest hand-over

    config = dag_config({"overrides": {"gate.min_speedup": 1.5}}, asset_event_extra(context))

    assert config.source == "s3://models/digits/v7"
    assert config.gate.min_speedup == 1.5
    assert dag_config({"source": "models:/digits@candidate"},
                      asset_event_extra(context)).source == "models:/digits@candidate"


def test_without_an_event_the_yaml_stands(dag_yaml):
    assert asset_event_extra({}) == {}
    assert dag_config({}, {}).source == "s3://models/digits/v1"
    # a manual run's params: the Params' defaults
    assert dag_config({"source": None, "overrides": {}}, {}).source == "s3://models/digits/v1"


def test_the_run_context_says_how_the_run_was_started():
    context = {"dag": SimpleNamespace(dag_id="model_optimization"), "run_id": "asset__1",
               "ti": SimpleNamespace(task_id="pull", try_number=1),
               "dag_run": SimpleNamespace(run_type=SimpleNamespace(value="asset_triggered"))}

    assert run_context_of(context) == {"dag_id": "model_optimization", "dag_run_id": "asset__1",
                                       "task_id": "pull", "try_number": 1,
                                       "run_type": "asset_triggered"}


# Each was taken from a trigger on main, and each was shown to do harm (issue 29).
HOSTILE = {
    "the op scan switched off": ("security.allow_ops", ["WriteFile"]),
    "the worker's MLflow credentials sent to another host":
        ("mlflow.tracking_uri", "http://203.0.113.7:5000"),
    "model assets written where the poster chooses": ("workdir", "/opt/airflow/dags/pwned"),
    "the accuracy budget switched off": ("gate.max_accuracy_drop_abs", None),
    "the S3 keys sent to another host": ("s3.endpoint_url", "http://203.0.113.7:9000"),
    "the memory budget raised": ("resources.memory_gb", 512),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_an_asset_event_cannot_set_what_the_yaml_does_not_allow(dag_yaml, case):
    key, value = HOSTILE[case]
    extra = asset_event_extra(_events(_event(source="s3://models/digits/v7",
                                             overrides={key: value})))
    with pytest.raises(ConfigError, match=f"^asset event extra: '{key}' (can never|may not) "
                                          "come from a trigger"):
        dag_config({}, extra)


@pytest.mark.parametrize("case", HOSTILE)
def test_a_dag_run_conf_cannot_set_what_the_yaml_does_not_allow(dag_yaml, case):
    key, value = HOSTILE[case]
    with pytest.raises(ConfigError, match=f"^dag_run.conf: '{key}' (can never|may not) come "
                                          "from a trigger"):
        dag_config({"source": None, "overrides": {key: value}}, {})


@pytest.fixture
def run_yaml(tmp_path, model_dir):
    """A pipeline config on a real model, as ``tfopt run`` would start work on it."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"source: {model_dir('keras_cnn')}\n"
                    f"workdir: {tmp_path / 'work'}\n"
                    "benchmark: {batch_sizes: [1], min_runs: 30, min_seconds: 0.5}\n"
                    "tuning: {enabled: false}\n"
                    f"mlflow: {{tracking_uri: 'sqlite:///{tmp_path / 'mlflow.db'}'}}\n")
    return path


@pytest.mark.parametrize("case", HOSTILE)
def test_tfopt_run_refuses_a_conf_that_sets_what_a_trigger_may_not_before_any_work(
        tmp_path, run_yaml, case):
    key, value = HOSTILE[case]
    started = time.monotonic()
    result = run_tfopt("run", "--config", run_yaml, "--conf",
                       json.dumps({"overrides": {key: value}}), timeout=120)
    assert_clean_failure(result, 2, f"--conf: '{key}'", "come from a trigger")
    assert not (tmp_path / "work").exists()  # nothing pulled, nothing written
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("key", ["security.allow_ops", "mlflow.tracking_uri", "s3.endpoint_url",
                                 "workdir", "resources.memory_gb", "mlflow", "triggers"])
def test_listing_a_key_that_can_never_come_from_a_trigger_is_a_config_error(tmp_path, key):
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"source: /m\ntriggers: {{allow_overrides: [gate.min_speedup, {key}]}}\n")
    with pytest.raises(ConfigError, match=f"key 'triggers.allow_overrides'.*'{key}' can never "
                                          "come from a trigger"):
        load_config(path)
    assert set(NEVER_FROM_A_TRIGGER) >= {"security", "mlflow", "s3", "workdir", "resources"}


def test_listing_a_key_the_config_does_not_have_is_a_config_error(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text("source: /m\ntriggers: {allow_overrides: [gate.min_sped]}\n")
    with pytest.raises(ConfigError, match="'gate.min_sped' is not a config key"):
        load_config(path)


def test_a_listed_key_or_section_is_allowed_and_nothing_around_it(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text("source: /m\ntriggers: {allow_overrides: [gate.min_speedup, tuning]}\n")

    def with_conf(overrides):
        return load_config(path, triggers=[_conf({"overrides": overrides})])

    config = with_conf({"gate.min_speedup": 1.3, "tuning.rounds": 2,
                        "tuning": {"enabled": False}})
    assert (config.gate.min_speedup, config.tuning.enabled) == (1.3, False)
    for key, value in [("gate.max_accuracy_drop_abs", None),  # a sibling of a listed key
                       ("gate", {"min_speedup": 1.3, "max_accuracy_drop_abs": None}),  # around
                       ("optimize.recipe", "strip_unused_nodes")]:
        with pytest.raises(ConfigError, match=f"'{key}' may not come from a trigger"):
            with_conf({key: value})


def _conf(payload):
    from tfopt.components.config import trigger_conf

    return trigger_conf.conf(payload)


# A 288-character value of nested YAML aliases: 9**9 strings once expanded. On main, loading
# it passed 8 GiB (MemoryError after ~40 s under a 2 GB address-space limit). Only ever loaded
# in a child limited to 1 GiB; in this process, a 9**6 one.
ALIAS_BOMB = alias_bomb(9)


def _limited_memory():
    limit = 1 << 30  # 1 GiB of address space: the config's loading must stay well inside it
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_tfopt_in_1_gib(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TFOPT_DEBUG", None)
    started = time.monotonic()
    done = subprocess.run([str(TFOPT), *map(str, args)], capture_output=True, text=True,
                          timeout=60, env=env, preexec_fn=_limited_memory, check=False)
    return done, time.monotonic() - started


@pytest.mark.parametrize("entry", ["--conf", "--set", "config file"])
def test_an_alias_bomb_is_refused_in_seconds_within_1_gib(run_yaml, entry):
    assert len(ALIAS_BOMB) < 333
    config, flags, where = run_yaml, [], "evaluation.data"
    if entry == "--conf":
        flags = ["--conf", json.dumps({"overrides": {"evaluation.data": ALIAS_BOMB}})]
        phrases = ["--conf: 'evaluation.data'", "anchors and aliases"]
    elif entry == "--set":
        flags = ["--set", f"{where}={ALIAS_BOMB}"]
        phrases = ["--set 'evaluation.data'", "anchors and aliases"]
    else:
        config = run_yaml.with_name("bomb.yaml")
        config.write_text(run_yaml.read_text() + f"evaluation: {{data: {ALIAS_BOMB}}}\n")
        phrases = ["the config expands to more than 100000 values"]
    done, seconds = run_tfopt_in_1_gib("run", "--config", config, *flags)
    assert_clean_failure(done, 2, *phrases)
    assert seconds < 10


def test_an_alias_bomb_in_an_events_extra_is_refused(dag_yaml):
    with pytest.raises(ConfigError, match="^asset event extra: 'source': YAML anchors"):
        dag_config({}, {"source": alias_bomb(6)})


SHAPES = [
    ({"sorce": "s3://m"}, "unknown key 'sorce'"),
    ({"overrides": ["gate.min_speedup", 2]}, '"overrides" must be a JSON object'),
    ({"overrides": {"gate min_speedup": 2}}, "'gate min_speedup' is not a dotted config key"),
    ({"overrides": {"Source": "s3://m"}}, "'Source' is not a dotted config key"),
    ({"source": 7}, "'source' must be a string, got int"),
    ({"source": "s3://m/" + "x" * MAX_VALUE_CHARS}, "more than the 2048 a trigger may send"),
    ({"overrides": {f"gate.k{i}": 1 for i in range(MAX_OVERRIDES + 1)}},
     f"{MAX_OVERRIDES + 1} overrides, more than the {MAX_OVERRIDES}"),
    ({"overrides": {"evaluation.data": ["x" * 2000] * 9}},
     f"more than the {MAX_TRIGGER_CHARS} a trigger may send"),
    ({"overrides": {"evaluation.data": float("nan")}}, "nan is not a finite number"),
    ({"overrides": {"evaluation.data": [[[["deep"]]]]}}, "nested more than 3 levels deep"),
    ({"overrides": {"evaluation.data": "&x s3://m"}}, "YAML anchors and aliases"),
]


@pytest.mark.parametrize("conf, message", SHAPES)
def test_a_conf_of_the_wrong_shape_is_refused_naming_what_is_wrong(dag_yaml, conf, message):
    with pytest.raises(ConfigError, match="^dag_run.conf: ") as caught:
        dag_config(conf, {})
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_events_extra_may_carry_other_keys_but_a_conf_may_not(dag_yaml):
    # an event's extra is shared with whatever else reads the asset: its other keys are left
    extra = {"source": "s3://models/digits/v8", "trained_by": "job-44", "metrics": {"acc": 1}}
    assert dag_config({}, asset_event_extra(_events(_event(**extra)))).source == extra["source"]
    with pytest.raises(ConfigError, match="^dag_run.conf: unknown key 'trained_by'"):
        dag_config(extra, {})


def _cli_args(config, conf=None, event=None, overrides=()):
    return argparse.Namespace(config=str(config), conf=conf, event=event,
                              overrides=list(overrides))


def test_the_operators_set_keeps_full_power_and_wins_over_the_trigger(allowing_yaml):
    config = load_config_from_args(_cli_args(
        allowing_yaml, conf=json.dumps({"source": "s3://models/digits/v9",
                                   "overrides": {"gate.min_speedup": 1.4}}),
        overrides=["security.allow_ops=[PrintV2]", "mlflow.tracking_uri=http://mlflow:5000",
                   "gate.min_speedup=1.1", "gate.max_accuracy_drop_abs=null"]))
    assert config.source == "s3://models/digits/v9"
    assert config.security.allow_ops == ["PrintV2"]
    assert config.mlflow.tracking_uri == "http://mlflow:5000"
    assert config.gate.min_speedup == 1.1 and config.gate.max_accuracy_drop_abs is None


def test_an_operator_may_widen_the_allow_list_with_set(dag_yaml):
    conf = json.dumps({"overrides": {"tuning.rounds": 2}})
    with pytest.raises(ConfigError, match="'tuning.rounds' may not come from a trigger"):
        load_config_from_args(_cli_args(dag_yaml, conf=conf))
    config = load_config_from_args(_cli_args(
        dag_yaml, conf=conf, overrides=["triggers.allow_overrides=[tuning.rounds]"]))
    assert config.tuning.rounds == 2


def test_tfopt_event_and_conf_stand_for_a_trigger_the_conf_winning(dag_yaml):
    event = json.dumps({"source": "s3://models/digits/v7", "trained_by": "job-42",
                        "evaluation_data": "s3://models/digits/v7.npz"})
    config = load_config_from_args(_cli_args(
        dag_yaml, event=event, conf=json.dumps({"source": "s3://models/digits/v8"})))
    assert (config.source, config.evaluation.data) == ("s3://models/digits/v8",
                                                       "s3://models/digits/v7.npz")
    with pytest.raises(ConfigError, match="^--event: 'workdir' can never come from a trigger"):
        load_config_from_args(_cli_args(dag_yaml, event=json.dumps(
            {"source": "s3://m", "overrides": {"workdir": "/tmp/elsewhere"}})))
