"""A scheduled pipeline, run again and again on one registry against what it promoted before.

Real services: moto's S3 server and an ``mlflow server``. Every run goes through the steps as
the DAG wires them (:mod:`tfopt.components.pipeline.step_runner`), each with its own DAG run id, on one work
directory. What won before, whatever its format, is the next run's champion:

1. a LiteRT candidate is promoted;
2. the same source again is judged against that LiteRT champion, timed in LiteRT with the
   thread count tuned for it, and rejected: nothing beats itself by the gate's margin;
3. a clearly slower source is rejected too; one version remains, the alias on it.

And a SavedModel champion gives way to a LiteRT candidate that beats it; an ONNX Runtime or
OpenVINO winner is published with its format, runtime and a snippet that loads it, and is the
next run's baseline in its own runtime.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from s3_server import REGION, fake_aws_credentials, moto_endpoint_fixture  # noqa: F401

from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.pipeline.run import STEPS
from tfopt.components.pipeline.step_runner import NEEDS, run_step
from tfopt.optimizer.benchmark.result import load_result

pytest_plugins = ["mlflow_server"]

BUCKET = "models"


def _train_wide_digits(directory: Path) -> Path:
    """A digits classifier with the demo model's signature and ~30x its compute."""
    import keras

    from tfopt.components.demo.digits import load_digits_split

    x_train, _, y_train, _ = load_digits_split(0)
    keras.utils.set_random_seed(1)
    inputs = keras.Input((8, 8, 1), name="image")
    x = keras.layers.Conv2D(96, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(192, 3, padding="same", activation="relu")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(256, activation="relu")(x)
    outputs = keras.layers.Dense(10, activation="softmax", name="digit")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x_train, y_train, epochs=3, batch_size=64, verbose=0)
    model.export(str(directory), verbose=False)
    return directory


@pytest.fixture(scope="module")
def sources(tmp_path_factory, moto_endpoint):
    """The digits CNN, a clearly slower model with its signature, and eval data, on S3."""
    import boto3

    from tfopt.components.demo.digits import train_digits_model

    root = tmp_path_factory.mktemp("scheduled")
    trained = train_digits_model(root / "digits", seed=0, epochs=10)
    wide = _train_wide_digits(root / "wide")
    with pytest.MonkeyPatch.context() as env:
        for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                            "AWS_DEFAULT_REGION": REGION}.items():
            env.setenv(name, value)
        s3 = boto3.session.Session().client("s3", endpoint_url=moto_endpoint)
        s3.create_bucket(Bucket=BUCKET)
        for prefix, directory in (("digits/v1", trained.saved_model), ("digits/wide", wide)):
            for path in sorted(p for p in directory.rglob("*") if p.is_file()):
                s3.upload_file(str(path), BUCKET,
                               f"{prefix}/{path.relative_to(directory).as_posix()}")
        s3.upload_file(str(trained.eval_data), BUCKET, "digits/eval.npz")
    return root


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    fake_aws_credentials(monkeypatch, tmp_path)


def _config(workdir: Path, tracking_uri: str, endpoint: str, name: str, source: str,
            targets: list[str]):
    return config_from_mapping({
        "source": f"s3://{BUCKET}/{source}",
        "workdir": str(workdir),
        "evaluation": {"data": f"s3://{BUCKET}/digits/eval.npz"},
        "benchmark": {"batch_sizes": [1], "min_runs": 50, "min_seconds": 1.5, "warmup": 5},
        "gate": {"max_accuracy_drop_abs": 0.01},
        "candidates": {"targets": targets, "savedmodel_variants": [],
                       "litert_flavours": ["dynamic_int8", "full_int8"],
                       "onnx_flavours": ["fp32"], "openvino_flavours": ["fp32"]},
        "tuning": {"time_budget_seconds": 3},
        "s3": {"endpoint_url": endpoint, "region": REGION},
        "mlflow": {"tracking_uri": tracking_uri, "experiment": "scheduled",
                   "registered_model": name},
        "schedule": {"cron": None, "asset": None},
    })


def run_as_the_dag_does(config, dag_run_id: str) -> dict:
    """Every step in the DAG's order, each given the outputs the DAG wires into it."""
    outputs: dict = {}
    context = {"dag_id": "model_optimization", "dag_run_id": dag_run_id,
               "run_type": "scheduled"}
    for step in STEPS:
        outputs[step] = run_step(step, config, {n: outputs[n] for n in NEEDS[step]}, context)
    return outputs


def _registry(tracking_uri: str, name: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    versions = sorted(v.version for v in client.search_model_versions(f"name = '{name}'"))
    return client, versions, client.get_registered_model(name).aliases.get("champion")


def test_a_litert_champion_is_the_next_runs_baseline_in_its_own_runtime(
        sources, mlflow_server, moto_endpoint, aws_env, tmp_path):
    name = "digits-scheduled"
    workdir = tmp_path / "work"

    def config(source):
        return _config(workdir, mlflow_server, moto_endpoint, name, source,
                       ["savedmodel", "litert"])

    first = run_as_the_dag_does(config("digits/v1"), "scheduled__1")
    assert first["gate"]["promote"] and first["gate"]["chosen"].startswith("litert_")
    client, versions, alias = _registry(mlflow_server, name)
    assert versions == ["1"] and str(alias) == "1"
    champion_tags = client.get_model_version(name, "1").tags
    assert champion_tags["tfopt.format"] == "tflite"
    tuned_threads = int(champion_tags["tfopt.runtime.num_threads"])

    second = run_as_the_dag_does(config("digits/v1"), "scheduled__2")
    assert second["benchmark"]["baseline_role"] == "champion"
    assert second["benchmark"]["baseline_format"] == "tflite"
    result = load_result(second["evaluate"]["result_path"])
    assert (result.baseline.label, result.baseline.runtime) == ("champion-v1", "ai-edge-litert")
    assert result.baseline.num_threads == tuned_threads
    # accuracy: the input's, the champion's in LiteRT, each candidate's; drops from the input
    assert result.reference is not None and result.reference.role == "reference"
    assert result.reference.quality.value > 0.9
    assert abs(result.baseline.quality.value - result.reference.quality.value) <= 0.02
    assert not second["gate"]["promote"]
    assert second["publish"]["version"] is None and not second["publish"]["alias_moved"]
    report = (Path(second["gate"]["report_dir"]) / "report.md").read_text()
    assert "## Accuracy" in report and "champion-v1" in report and "| input |" in report

    third = run_as_the_dag_does(config("digits/wide"), "scheduled__3")
    assert third["benchmark"]["baseline_label"] == "champion-v1"
    assert not third["gate"]["promote"]
    verdicts = json.loads(Path(third["gate"]["verdict_path"]).read_text())["verdicts"]
    assert all(any(c["name"] == "latency" and not c["passed"] for c in v["checks"])
               for v in verdicts), "every candidate of the slower model loses on latency"

    _, versions, alias = _registry(mlflow_server, name)
    assert versions == ["1"] and str(alias) == "1"


def test_a_savedmodel_champion_gives_way_to_a_litert_candidate_that_beats_it(
        sources, mlflow_server, moto_endpoint, aws_env, tmp_path):
    name = "digits-savedmodel-first"
    workdir = tmp_path / "work"

    tf_only = _config(workdir, mlflow_server, moto_endpoint, name, "digits/v1", ["savedmodel"])
    first = run_as_the_dag_does(tf_only.model_copy(update={"gate": tf_only.gate.model_copy(
        update={"min_speedup": 1.02})}), "manual__tf")
    assert first["gate"]["promote"]
    client, _, alias = _registry(mlflow_server, name)
    assert client.get_model_version(name, str(alias)).tags["tfopt.format"] == "savedmodel"

    with_litert = _config(workdir, mlflow_server, moto_endpoint, name, "digits/v1",
                          ["savedmodel", "litert"])
    second = run_as_the_dag_does(with_litert, "manual__litert")

    assert second["benchmark"]["baseline_format"] == "savedmodel"
    assert second["gate"]["promote"] and second["gate"]["chosen"].startswith("litert_")
    client, versions, alias = _registry(mlflow_server, name)
    assert versions == ["1", "2"] and str(alias) == "2"
    moved = client.get_model_version(name, "2").tags
    assert moved["tfopt.format"] == "tflite" and moved["tfopt.replaced_version"] == "1"


def test_an_onnx_or_openvino_winner_is_published_loadable_and_judged_in_its_runtime(
        sources, mlflow_server, moto_endpoint, aws_env, tmp_path):
    import subprocess
    import sys

    from tfopt.components.storage.registry import download_registered_model

    name = "digits-other-runtimes"
    workdir = tmp_path / "work"
    first = run_as_the_dag_does(_config(workdir, mlflow_server, moto_endpoint, name,
                                        "digits/v1", ["onnx", "openvino"]), "manual__ort_ov")
    assert first["gate"]["promote"], first["gate"]["summary"]
    chosen = first["gate"]["chosen"]
    fmt, runtime, file = {"onnx_fp32": ("onnx", "onnxruntime", "model.onnx"),
                          "openvino_fp32": ("openvino", "openvino", "model.xml")}[chosen]
    report = (Path(first["gate"]["report_dir"]) / "report.md").read_text()
    assert "| onnx_fp32 | onnx | onnxruntime |" in report  # the candidate table
    assert "| openvino_fp32 | openvino | openvino |" in report
    client, versions, alias = _registry(mlflow_server, name)
    assert versions == ["1"] and str(alias) == "1"
    tags = client.get_model_version(name, "1").tags
    assert (tags["tfopt.format"], tags["tfopt.runtime"], tags["tfopt.candidate"]) == (
        fmt, runtime, chosen)
    version = tmp_path / "version"
    download_registered_model(f"models:/{name}@champion", version, mlflow_server)
    assert (version / file).is_file() and (version / f"{file}.json").is_file()
    done = subprocess.run([sys.executable, "-c", tags["tfopt.load"] + "print(sorted(outputs))"],
                          cwd=version, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "['output_0']", done.stderr

    second = run_as_the_dag_does(_config(workdir, mlflow_server, moto_endpoint, name,
                                         "digits/v1", ["savedmodel"]), "manual__tf_again")
    assert second["benchmark"]["baseline_format"] == fmt
    result = load_result(second["evaluate"]["result_path"])
    assert (result.baseline.label, result.baseline.runtime) == ("champion-v1", runtime)
    assert result.baseline.num_threads == int(tags["tfopt.runtime.num_threads"])
    assert abs(result.baseline.quality.value - result.reference.quality.value) <= 0.01
