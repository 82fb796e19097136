"""The champion lookup and registry downloads, against a real MLflow server.

The registry is filled directly with MlflowClient (real SavedModels from model_zoo and LiteRT
files converted from them, logged to a run and registered with the tags publish writes), so
these tests do not depend on publish; tests/test_publish.py checks that a published champion
comes back by the same lookup, and tests/test_scheduled_runs.py runs the pipeline again and
again against what it promoted.
"""

import json
import os
import shutil
import socket
import time

import numpy as np
import pytest
from mlflow import MlflowClient

from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.storage.registry import download_registered_model
from tfopt.components.tracking import TrackingError
from tfopt.components.tracking.champion import ChampionUnusableError, find_champion
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.errors import SourceNotFoundError
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.runtime import RUNTIMES, load_runner

pytest_plugins = ["mlflow_server"]  # the mlflow_server fixture


def register(client: MlflowClient, name: str, directory, alias: str | None = None,
             tags: dict | None = None) -> str:
    """A version of ``name`` made from ``directory``, logged as a run's ``model/`` artifact."""
    experiment = client.get_experiment_by_name("registered-by-hand")
    experiment_id = (experiment.experiment_id if experiment
                     else client.create_experiment("registered-by-hand"))
    run = client.create_run(experiment_id)
    client.log_artifacts(run.info.run_id, str(directory), "model")
    if not client.search_registered_models(f"name = '{name}'"):
        client.create_registered_model(name)
    version = client.create_model_version(name, f"{run.info.artifact_uri}/model",
                                          run_id=run.info.run_id, tags=tags).version
    if alias:
        client.set_registered_model_alias(name, alias, version)
    return str(version)


@pytest.fixture(scope="module")
def client(mlflow_server):
    return MlflowClient(mlflow_server, registry_uri=mlflow_server)


def config(tracking_uri: str, workdir, name: str, alias: str = "champion"):
    return config_from_mapping({"source": "models:/unused@champion", "workdir": str(workdir),
                                "mlflow": {"tracking_uri": tracking_uri,
                                           "registered_model": name, "alias": alias}})


def test_no_local_store_means_no_champion_and_creates_none(tmp_path):
    store = tmp_path / "mlflow" / "mlflow.db"

    assert find_champion(config(f"sqlite:///{store}", tmp_path, "digits")) is None
    assert not store.exists() and not (tmp_path / "mlflow").exists()


def test_no_registered_model_means_no_champion(mlflow_server, tmp_path):
    assert find_champion(config(mlflow_server, tmp_path, "never-registered")) is None


def test_a_model_without_the_alias_has_no_champion(mlflow_server, client, model_dir, tmp_path):
    register(client, "no-alias-yet", model_dir("keras_cnn"))

    assert find_champion(config(mlflow_server, tmp_path, "no-alias-yet")) is None
    assert not (tmp_path / "champions").exists()


def test_the_champion_is_downloaded_once_per_version(mlflow_server, client, model_dir,
                                                     tmp_path):
    first = register(client, "digits", model_dir("keras_cnn"), alias="champion")
    cfg = config(mlflow_server, tmp_path, "digits")

    champion = find_champion(cfg)
    inode = os.stat(champion.path).st_ino
    again = find_champion(cfg)

    assert champion.uri == "models:/digits@champion" and champion.version == first
    assert champion.path == str(tmp_path / "champions" / f"digits-v{first}")
    assert champion.digest == model_digest(model_dir("keras_cnn"))
    assert os.path.isfile(os.path.join(champion.path, "variables", "variables.index"))
    assert again == champion and os.stat(again.path).st_ino == inode  # reused, not re-fetched

    second = register(client, "digits", model_dir("tf_module_two_signatures"), alias="champion")
    moved = find_champion(cfg)

    assert moved.version == second != first
    assert moved.digest == model_digest(model_dir("tf_module_two_signatures"))
    assert os.stat(champion.path).st_ino == inode  # the old version's directory is untouched


def test_another_alias_names_another_champion(mlflow_server, client, model_dir, tmp_path):
    register(client, "two-aliases", model_dir("keras_cnn"), alias="champion")
    staged = register(client, "two-aliases", model_dir("tf_module_two_signatures"),
                      alias="challenger")

    found = find_champion(config(mlflow_server, tmp_path, "two-aliases", alias="challenger"))

    assert found.uri == "models:/two-aliases@challenger" and found.version == staged


def test_a_registry_source_downloads_by_version_or_alias(mlflow_server, client, model_dir,
                                                         tmp_path):
    first = register(client, "source", model_dir("keras_cnn"))
    second = register(client, "source", model_dir("tf_module_two_signatures"), alias="latest-ok")

    by_version = download_registered_model(f"models:/source/{first}", tmp_path / "a",
                                           mlflow_server)
    by_alias = download_registered_model("models:/source@latest-ok", tmp_path / "b",
                                         mlflow_server)
    replaced = download_registered_model(f"models:/source/{first}", tmp_path / "b",
                                         mlflow_server)

    assert (by_version, by_alias, replaced) == (first, second, first)
    assert model_digest(tmp_path / "a") == model_digest(model_dir("keras_cnn"))
    assert model_digest(tmp_path / "b") == model_digest(model_dir("keras_cnn"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no staging left behind


@pytest.mark.parametrize("uri, message", [
    ("models:/nobody@champion", "models:/nobody@champion: no registered model 'nobody'"),
    ("models:/known@nope",
     "models:/known@nope: registered model 'known' has no alias 'nope' (aliases: champion)"),
    ("models:/known/99", "models:/known/99: registered model 'known' has no version 99"),
    ("models:/known", "models:/known: a registry source is models:/<name>@<alias> or"),
])
def test_an_unknown_registry_source_is_one_line_naming_it(mlflow_server, client, model_dir,
                                                          tmp_path, uri, message):
    if not client.search_registered_models("name = 'known'"):
        register(client, "known", model_dir("tf_module_two_signatures"), alias="champion")

    with pytest.raises(SourceNotFoundError) as caught:
        download_registered_model(uri, tmp_path / "model", mlflow_server)

    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert not (tmp_path / "model").exists()


def test_a_version_that_records_no_format_and_is_no_saved_model_is_unusable(
        mlflow_server, client, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "README.txt").write_text("not a model")
    register(client, "not-a-model", notes, alias="champion")

    with pytest.raises(ChampionUnusableError) as caught:
        find_champion(config(mlflow_server, tmp_path / "work", "not-a-model"))
    assert str(caught.value) == (
        "models:/not-a-model/1 (the 'champion' alias) records no format (no MLmodel file, no "
        "tfopt.format tag) and is not a SavedModel: its files are README.txt")
    assert caught.value.exit_code == 6


@pytest.fixture(scope="module")
def litert_folder(model_dir, tmp_path_factory):
    """A LiteRT version's folder as publish logs it: the file, its sidecar, tuned settings."""
    from tfopt.optimizer.candidates.litert.convert import convert_to_litert

    folder = tmp_path_factory.mktemp("litert_version")
    convert_to_litert(model_dir("keras_cnn"), folder / "model.tflite", "fp32")
    (folder / "runtime_settings.json").write_text(json.dumps(
        {"num_threads": 1, "intra_op_threads": None, "inter_op_threads": None}))
    return folder


@pytest.fixture(scope="module")
def converted_folders(model_dir, tmp_path_factory):
    """An ONNX and an OpenVINO version's folders as publish logs them: the model file(s), the
    sidecar, tuned settings."""
    from tfopt.optimizer.candidates.onnx.convert import convert_to_onnx
    from tfopt.optimizer.candidates.openvino.convert import convert_to_openvino

    folders = {"onnx": tmp_path_factory.mktemp("onnx_version"),
               "openvino": tmp_path_factory.mktemp("openvino_version")}
    convert_to_onnx(model_dir("keras_cnn"), folders["onnx"] / "model.onnx", "fp32")
    convert_to_openvino(model_dir("keras_cnn"), folders["openvino"] / "model.xml", "fp32")
    for folder in folders.values():
        (folder / "runtime_settings.json").write_text(json.dumps(
            {"num_threads": 1, "intra_op_threads": None, "inter_op_threads": None}))
    return folders


def _outputs(runner, signature_source):
    feeds = make_inputs(load_runner(signature_source).signature, batch_size=2, seed=3)
    return runner(feeds)


@pytest.mark.parametrize("fmt", ["savedmodel", "tflite", "onnx", "openvino"])
def test_the_champions_runner_comes_from_the_format_its_version_records(
        mlflow_server, client, model_dir, litert_folder, converted_folders, tmp_path, fmt):
    """Every format publish writes, as it writes it: the folder and its tfopt.* tags."""
    folder = {"savedmodel": model_dir("keras_cnn"), "tflite": litert_folder,
              **converted_folders}[fmt]
    runtime = {"savedmodel": "tensorflow", "tflite": "ai-edge-litert",
               "onnx": "onnxruntime", "openvino": "openvino"}[fmt]
    name = f"recorded-{fmt}"
    register(client, name, folder, alias="champion",
             tags={"tfopt.format": fmt, "tfopt.runtime": runtime, "tfopt.candidate": "x"})

    champion = find_champion(config(mlflow_server, tmp_path, name))

    assert (champion.format, champion.runtime, champion.candidate) == (fmt, runtime, "x")
    runner = load_runner(champion.path, format=champion.format,
                         num_threads=champion.num_threads)
    assert runner.format == fmt
    expected = _outputs(load_runner(model_dir("keras_cnn")), model_dir("keras_cnn"))
    got = _outputs(runner, model_dir("keras_cnn"))
    np.testing.assert_allclose(got["output_0"], expected["output_0"], atol=1e-4)
    if fmt != "savedmodel":
        # the thread count tuning recorded beside the file is what the champion runs with
        assert champion.num_threads == 1 == runner.num_threads
        suffix = {"tflite": ".tflite", "onnx": ".onnx", "openvino": ".xml"}[fmt]
        assert champion.path.endswith(f"model{suffix}")
        assert champion.digest == model_digest(folder)  # the model file(s), sidecar, settings


def test_a_tflite_file_with_a_savedmodel_tag_is_read_as_the_tag_says(
        mlflow_server, client, litert_folder, tmp_path):
    register(client, "mislabelled", litert_folder, alias="champion",
             tags={"tfopt.format": "savedmodel", "tfopt.runtime": "tensorflow"})

    with pytest.raises(ChampionUnusableError, match=r"^models:/mislabelled/1 \(the 'champion' "
                       r"alias\) cannot be read as savedmodel: .*no saved_model.pb"):
        find_champion(config(mlflow_server, tmp_path, "mislabelled"))


def test_an_unknown_format_is_unusable_and_named(mlflow_server, client, litert_folder,
                                                 tmp_path):
    register(client, "onnx-someday", litert_folder, alias="champion",
             tags={"tfopt.format": "torchscript", "tfopt.runtime": "torch"})

    with pytest.raises(ChampionUnusableError) as caught:
        find_champion(config(mlflow_server, tmp_path, "onnx-someday"))
    assert str(caught.value).startswith(
        "models:/onnx-someday/1 (the 'champion' alias) is in format 'torchscript', which this "
        "tfopt cannot run (it runs savedmodel, tflite")


def test_a_champion_whose_runtime_is_not_installed_is_unusable(
        mlflow_server, client, litert_folder, tmp_path, monkeypatch):
    register(client, "needs-litert", litert_folder, alias="champion",
             tags={"tfopt.format": "tflite", "tfopt.runtime": "ai-edge-litert"})
    # As on an image built without the litert extra: the interpreter's module is missing.
    import dataclasses

    monkeypatch.setitem(RUNTIMES, "tflite", dataclasses.replace(
        RUNTIMES["tflite"], imports="ai_edge_litert_not_installed_here"))

    with pytest.raises(ChampionUnusableError) as caught:
        find_champion(config(mlflow_server, tmp_path, "needs-litert"))
    assert str(caught.value) == (
        "models:/needs-litert/1 (the 'champion' alias) is a tflite model for ai-edge-litert, "
        "and the ai-edge-litert package is not installed here")


def test_a_corrupt_champion_artifact_is_unusable(mlflow_server, client, tmp_path):
    folder = tmp_path / "corrupt"
    folder.mkdir()
    (folder / "model.tflite").write_bytes(b"not a flatbuffer" * 64)
    register(client, "corrupt", folder, alias="champion",
             tags={"tfopt.format": "tflite", "tfopt.runtime": "ai-edge-litert"})

    with pytest.raises(ChampionUnusableError, match=r"^models:/corrupt/1 \(the 'champion' "
                       r"alias\) cannot be read as tflite: cannot load LiteRT model"):
        find_champion(config(mlflow_server, tmp_path / "work", "corrupt"))


def test_a_champion_holding_a_symlink_is_refused_before_it_is_read(mlflow_server, client,
                                                                   model_dir, tmp_path):
    register(client, "linked", model_dir("keras_cnn"), alias="champion",
             tags={"tfopt.format": "savedmodel", "tfopt.runtime": "tensorflow"})
    cfg = config(mlflow_server, tmp_path, "linked")
    champion = find_champion(cfg)
    # A version is downloaded once and reused: plant a link in the kept copy, as a tampered
    # store or shared work directory would.
    os.symlink("/etc/hostname", os.path.join(champion.directory, "assets_leak.txt"))

    with pytest.raises(ChampionUnusableError, match="'assets_leak.txt' is a symbolic link"):
        find_champion(cfg)


def test_a_champion_recorded_in_an_mlmodel_file_is_read_from_its_metadata(
        mlflow_server, client, litert_folder, tmp_path):
    folder = tmp_path / "mlflow_model"
    shutil.copytree(litert_folder, folder / "artifacts")
    (folder / "MLmodel").write_text(
        "flavors:\n  python_function: {loader_module: tfopt_pyfunc}\n"
        "metadata:\n  tfopt: {format: tflite, runtime: ai-edge-litert, "
        "artifact: artifacts/model.tflite}\n")
    register(client, "as-mlmodel", folder, alias="champion")  # no tfopt.* tags at all

    champion = find_champion(config(mlflow_server, tmp_path, "as-mlmodel"))

    assert (champion.format, champion.num_threads) == ("tflite", 1)
    assert champion.path.endswith("artifacts/model.tflite")


@pytest.mark.parametrize("tfopt_block, named", [
    ("{format: [tflite], runtime: ai-edge-litert, artifact: artifacts/model.tflite}",
     "its MLmodel records format as list ['tflite'], not a string"),
    ("{format: tflite, runtime: ai-edge-litert, artifact: 7}",
     "its MLmodel records artifact as int 7, not a string"),
    ("[tflite]", "its MLmodel's metadata.tfopt is a list, not a mapping"),
])
def test_an_mlmodel_recording_its_format_or_artifact_in_the_wrong_type_is_unusable(
        mlflow_server, client, litert_folder, tmp_path, tfopt_block, named):
    folder = tmp_path / "mlflow_model"
    shutil.copytree(litert_folder, folder / "artifacts")
    (folder / "MLmodel").write_text(
        "flavors:\n  python_function: {loader_module: tfopt_pyfunc}\n"
        f"metadata:\n  tfopt: {tfopt_block}\n")
    version = register(client, "wrong-types", folder, alias="champion")

    with pytest.raises(ChampionUnusableError) as caught:
        find_champion(config(mlflow_server, tmp_path, "wrong-types"))

    assert caught.value.exit_code == 6
    assert str(caught.value).startswith(f"models:/wrong-types/{version} (the 'champion' alias)")
    assert named in str(caught.value)


def test_a_thread_count_below_one_names_the_version(mlflow_server, client, litert_folder,
                                                    tmp_path):
    folder = tmp_path / "negative_threads"
    shutil.copytree(litert_folder, folder)
    (folder / "runtime_settings.json").write_text(json.dumps({"num_threads": -7}))
    version = register(client, "negative-threads", folder, alias="champion",
                       tags={"tfopt.format": "tflite", "tfopt.runtime": "ai-edge-litert"})

    with pytest.raises(ChampionUnusableError, match=(
            rf"^models:/negative-threads/{version} \(the 'champion' alias\) records "
            r"num_threads -7 in its runtime settings; a thread count is at least 1$")):
        find_champion(config(mlflow_server, tmp_path, "negative-threads"))


def test_a_champion_records_the_source_it_was_optimized_from(mlflow_server, client,
                                                             litert_folder, tmp_path):
    register(client, "with-source", litert_folder, alias="champion",
             tags={"tfopt.format": "tflite", "tfopt.runtime": "ai-edge-litert",
                   "tfopt.source_digest": "sha256:the-source"})

    champion = find_champion(config(mlflow_server, tmp_path, "with-source"))

    assert champion.source_digest == "sha256:the-source"


def test_an_unreachable_registry_fails_fast_instead_of_finding_no_champion(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening
        started = time.monotonic()
        with pytest.raises(TrackingError, match=f"^MLflow at {closed} is unreachable"):
            find_champion(config(closed, tmp_path, "digits"))
        assert time.monotonic() - started < 30


def test_an_unusable_champion_stops_the_run_with_exit_6_and_one_line(tmp_path, model_dir,
                                                                     capsys):
    from cli_testing import assert_clean_failure, run_tfopt

    from tfopt.components.cli import main

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    local = MlflowClient(store, registry_uri=store)
    local.create_experiment("registered-by-hand",
                            artifact_location=(tmp_path / "artifacts").as_uri())
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "model.tflite").write_bytes(b"\0" * 1024)
    register(local, "digits", corrupt, alias="champion",
             tags={"tfopt.format": "tflite", "tfopt.runtime": "ai-edge-litert"})
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"source: {model_dir('keras_cnn')}\n"
        f"workdir: {tmp_path / 'work'}\n"
        "candidates: {targets: [savedmodel], savedmodel_variants: []}\n"
        f"mlflow: {{tracking_uri: '{store}', registered_model: digits}}\n")
    outputs = {}
    for step in ("pull", "freeze", "optimize"):
        inputs = json.dumps({"pull": outputs["pull"]} if outputs else {})
        assert main(["step", step, "--config", str(config), "--inputs", inputs]) == 0
        outputs[step] = json.loads(capsys.readouterr().out)

    done = run_tfopt("step", "benchmark", "--config", config, "--inputs", json.dumps(outputs))

    assert_clean_failure(done, 6, "models:/digits/1 (the 'champion' alias) cannot be read as "
                                  "tflite: cannot load LiteRT model")
    assert not list((tmp_path / "work").glob("runs/*/benchmark-*/result.json"))
