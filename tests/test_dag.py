"""The model_optimization DAG: imports cleanly, parses fast and light, and is wired right."""

import pytest
from airflow_testing import parse_dags

from tfopt.components.pipeline.step_runner import POD_MEMORY_KEY, pod_memory
from tfopt.components.pipeline.step_table import BENCHMARK_AND_EVALUATE, BY_NAME, MIB, NAMES

# The wiring is the step table's: each task waits for exactly the steps it reads.
UPSTREAM = {step.name: sorted(step.needs) for step in BY_NAME.values()}


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    return parse_dags(tmp_path_factory.mktemp("airflow"))


def test_dagbag_has_no_import_errors(parsed):
    assert parsed["import_errors"] == {}
    assert parsed["dags"] == ["model_optimization"]


def test_parsing_the_dag_file_is_fast_and_imports_no_tensorflow(parsed):
    assert parsed["heavy_modules"] == []
    assert parsed["file_seconds"]["model_optimization.py"] < 2.0


def test_tasks_are_the_step_tables_steps_wired_by_what_each_reads(parsed):
    tasks = parsed["tasks"]
    assert sorted(tasks) == sorted(NAMES)
    assert {name: task["upstream"] for name, task in tasks.items()} == UPSTREAM
    assert tasks["publish"]["upstream"] == ["gate", "pull"]


def test_tasks_retry_with_backoff(parsed):
    for name, task in parsed["tasks"].items():
        assert task["retries"] >= 1 and task["exponential"], name


def test_every_task_has_the_configured_execution_timeout(parsed):
    # one run at a time: without it, a task that never ends holds every later run
    from tfopt.components.config.pipeline_config import ResourcesConfig

    minutes = ResourcesConfig().task_timeout_minutes
    for name, task in parsed["tasks"].items():
        assert task["timeout_seconds"] == minutes * 60, name


def test_pod_tasks_get_the_execution_timeout_set_in_the_config(tmp_path):
    config = tmp_path / "k8s.yaml"
    config.write_text("source: s3://models/digits\nexecution: {mode: kubernetes}\n"
                      "resources: {task_timeout_minutes: 90}\n"
                      "schedule: {cron: null, asset: null}\n")
    parsed = parse_dags(tmp_path / "airflow", config)
    assert parsed["import_errors"] == {}
    assert {t["type"] for t in parsed["tasks"].values()} == {"KubernetesPodOperator"}
    assert {t["timeout_seconds"] for t in parsed["tasks"].values()} == {90 * 60}


def test_dag_is_documented_tagged_and_does_not_catch_up(parsed):
    assert parsed["catchup"] is False
    assert parsed["doc"] and "mlops" in parsed["tags"]


def test_runs_on_a_cron_and_on_the_trained_model_asset(parsed):
    assert parsed["timetable"] == "AssetOrTimeSchedule"


def test_trigger_conf_is_validated_by_json_schema(parsed):
    params = parsed["params"]
    assert set(params) == {"source", "overrides"}
    assert params["overrides"]["type"] == "object"
    assert "string" in params["source"]["type"]
    # the trust boundary's sizes, refused by Airflow when the run is triggered
    assert params["overrides"]["maxProperties"] == 32
    assert params["source"]["maxLength"] == 2048


@pytest.fixture(scope="module")
def kubernetes_config(tmp_path_factory):
    config = tmp_path_factory.mktemp("k8s") / "k8s.yaml"
    config.write_text(
        "source: s3://models/digits\n"
        "execution:\n"
        "  mode: kubernetes\n"
        "  kubernetes:\n"
        "    image: registry.example.com/tfopt:1.2.3\n"
        "    cpu_request: '4'\n"
        "    cpu_limit: '4'\n"
        "    node_selector: {workload: cpu-benchmark}\n"
        "schedule: {cron: null, asset: null}\n")
    return config


@pytest.fixture(scope="module")
def kubernetes_parsed(tmp_path_factory, kubernetes_config):
    """The DAG in Kubernetes mode, its benchmark pod rendered for each pull output and each
    trigger (one parse: Airflow's import is most of a parse's time)."""
    return parse_dags(tmp_path_factory.mktemp("airflow"), kubernetes_config,
                      render_task="benchmark", pull_outputs=PULLED, triggers=TRIGGERS)


def test_containerized_mode_renders_pod_specs_without_a_cluster(kubernetes_parsed):
    parsed = kubernetes_parsed
    assert parsed["import_errors"] == {}
    assert {t["type"] for t in parsed["tasks"].values()} == {"KubernetesPodOperator"}
    assert {name: task["upstream"] for name, task in parsed["tasks"].items()} == UPSTREAM
    pod = parsed["pod"]
    assert pod["image"] == "registry.example.com/tfopt:1.2.3"
    # the image's entrypoint, which sizes the threads from the pod's CPU limit, then tfopt
    assert pod["command"] == ["python", "-m", "tfopt.components.orchestration.container_entrypoint", "tfopt"]
    assert pod["args"][:2] == ["step", "benchmark"] and "--inputs" in pod["args"]
    assert pod["resources"]["requests"]["cpu"] == "4" == pod["resources"]["limits"]["cpu"]
    assert pod["node_selector"] == {"workload": "cpu-benchmark"}
    assert "tfopt-work" in pod["volumes"]
    assert parsed["timetable"] == "NullTimetable"
    # Pods are sized from the model pulled: pull's output names each later pod's memory.
    memory = parsed["memory"]
    for label, pulled in PULLED.items():
        assert memory[label]["pull"] == {"request": "4Gi", "limit": "8Gi"}, label
        for step, size in pulled[POD_MEMORY_KEY].items():
            assert memory[label][step] == {"request": size, "limit": size}, (label, step)
    small, large = (int(memory[label]["benchmark"]["limit"].removesuffix("Mi"))
                    for label in ("48 MiB", "191 MiB"))
    # the benchmark stage's measured peaks for the two sizes, the same headroom on both
    measured = BENCHMARK_AND_EVALUATE.peak(191 * MIB) / BENCHMARK_AND_EVALUATE.peak(48 * MIB)
    assert measured > 1.5 and abs(large / small - measured) < 0.2


def _pulled(size_bytes: int) -> dict:
    from tfopt.components.config.pipeline_config import config_from_mapping

    config = config_from_mapping({"source": "s3://models/digits"})
    return {"uri": "s3://models/digits", "path": "/app/work/model", "digest": "sha256:0",
            "size_bytes": size_bytes, POD_MEMORY_KEY: pod_memory(config, size_bytes)}


PULLED = {"48 MiB": _pulled(48 * 2**20), "191 MiB": _pulled(191 * 2**20)}


# What an asset-triggered run's pods are handed (on main they got dag_run.conf only, so the pods
# optimized the YAML's source instead of the event's model).
TRIGGERS = {
    "asset event": {"conf": {}, "events": [
        {"source": "s3://models/digits/v6"},
        {"source": "s3://models/digits/v7", "evaluation_data": "s3://models/digits/v7.npz",
         "trained_by": "job-42"},
        {"trained_by": "job-43"}]},  # names no model: not the latest hand-over
    "allowed override": {"conf": {}, "events": [
        {"source": "s3://models/digits/v7", "overrides": {"gate.min_speedup": 1.2}}]},
    "cron": {"conf": None, "events": []},
    "conf over event": {"conf": {"source": "models:/digits@candidate"},
                        "events": [{"source": "s3://models/digits/v7"}]},
    "hostile event": {"conf": {}, "events": [
        {"source": "s3://models/digits/v7",
         "overrides": {"mlflow.tracking_uri": "http://203.0.113.7:5000"}}]},
}


def test_kubernetes_pods_get_the_asset_events_model_checked_like_any_trigger(
        kubernetes_parsed, kubernetes_config, tmp_path):
    from tfopt.components.cli import build_parser
    from tfopt.components.cli.run_command import load_config_from_args
    from tfopt.components.config.pipeline_config import ConfigError

    def pod_config(label: str, mounted=kubernetes_config):
        """The config ``tfopt step`` builds from the pod's rendered arguments, with ``mounted``
        as the config file at the pod's path."""
        args = build_parser().parse_args(kubernetes_parsed["rendered_args"][label])
        assert args.config == "/etc/tfopt/pipeline.yaml"
        args.config = str(mounted)
        return load_config_from_args(args)

    asset = pod_config("asset event")
    assert asset.source == "s3://models/digits/v7"
    assert asset.evaluation.data == "s3://models/digits/v7.npz"
    assert pod_config("cron").source == "s3://models/digits"
    assert pod_config("conf over event").source == "models:/digits@candidate"
    with pytest.raises(ConfigError, match="^--event: 'gate.min_speedup' may not come from a "
                                          "trigger"):
        pod_config("allowed override")
    allowing = tmp_path / "allowing.yaml"
    allowing.write_text(kubernetes_config.read_text()
                        + "triggers: {allow_overrides: [gate.min_speedup]}\n")
    assert pod_config("allowed override", allowing).gate.min_speedup == 1.2
    with pytest.raises(ConfigError, match="^--event: 'mlflow.tracking_uri' can never come from "
                                          "a trigger"):
        pod_config("hostile event", allowing)
