"""A published champion, as everything that consumes an MLflow registry takes it.

Two champions are published by the real publish step to a real ``mlflow server``: the optimized
SavedModel of model_zoo's keras_cnn and its LiteRT fp32 conversion (with real runtime tuning),
each judged by the real gate against a copy of the input that does extra, output-neutral work
(so the gate promotes on any machine). Then, from ``models:/NAME@champion`` alone:
``mlflow.pyfunc.load_model`` predicts what the original model computes, within the gate's
tolerance for that candidate; ``mlflow models serve`` answers the input example; the champion
lookup finds it and benchmarks it in its own runtime; a registry source pulls the SavedModel
inside it; the MLflow UI, in a real headless Chromium, shows the verdict, the candidates table and
a chart; and (slow) its requirements alone, installed in a fresh venv, load and run it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pytest
from benchmark_testing import with_output_neutral_work
from local_ports import free_port
from mlflow_model_testing import litert_candidate, savedmodel_candidate
from publish_inputs import judge
from served_process import served

from tfopt.components.config.pipeline_config import PipelineConfig, config_from_mapping
from tfopt.components.pipeline.artifacts import CandidateModel, PublishOutput, PulledModel
from tfopt.components.pipeline.workspace import Workspace
from tfopt.components.steps.publish import publish
from tfopt.components.tracking.champion import find_champion
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.errors import NotASavedModelError
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.runtime import load_runner, read_signature

pytest_plugins = ["mlflow_server"]

FORMATS = {"savedmodel": "tensorflow", "tflite": "ai-edge-litert"}
BIN = Path(sys.executable).parent
SERVE_STARTUP_SECONDS = 180  # TensorFlow's import alone is ~10 s on a loaded 2-core machine
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@dataclass(frozen=True)
class Published:
    name: str
    config: PipelineConfig
    candidate: CandidateModel
    out: PublishOutput

    @property
    def uri(self) -> str:
        return f"models:/{self.name}@champion"


@pytest.fixture(scope="module")
def source(model_dir):
    return model_dir("keras_cnn")


@pytest.fixture(scope="module")
def published(source, mlflow_server, tmp_path_factory) -> dict[str, Published]:
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.optimize.flow import apply_recipe
    from tfopt.optimizer.optimize.recipe import DEPLOYMENT_RECIPE, Recipe
    from tfopt.optimizer.runtime_tuning import RUNTIME_SETTINGS_FILE, tune_runtime

    root = tmp_path_factory.mktemp("published")
    frozen = freeze(source)
    optimized = apply_recipe(frozen, Recipe.from_string(DEPLOYMENT_RECIPE))
    write_saved_model(optimized.model, root / "optimized")
    write_saved_model(with_output_neutral_work(frozen), root / "slowed_input")
    pulled = PulledModel(uri=str(source), path=str(source), digest=model_digest(source))
    candidates = {"savedmodel": savedmodel_candidate(root / "optimized"),
                  "tflite": litert_candidate(source, root / "litert_fp32")}
    made = {}
    for fmt, candidate in candidates.items():
        where = root / fmt
        where.mkdir()
        evaluation, gate = judge(where, root / "slowed_input", [candidate])
        assert gate.chosen == candidate.label, gate.summary
        if fmt == "tflite":  # tuned as the gate step tunes the chosen model, briefly
            tuned = tune_runtime(candidate.path, rounds=1, seconds_per_probe=0.1,
                                 batch_sizes=(1,), time_budget_seconds=2)
            gate = dataclasses.replace(gate, runtime_settings_path=str(
                tuned.to_json(where / RUNTIME_SETTINGS_FILE)))
        name = f"published-{fmt}"
        config = config_from_mapping({
            "source": str(source), "workdir": str(where / "work"),
            "mlflow": {"tracking_uri": mlflow_server, "experiment": name,
                       "registered_model": name}})
        ws = Workspace.for_run(config.workdir, pulled.digest, config.fingerprint())
        out = publish(config, pulled, [candidate], evaluation, gate, ws,
                      {"dag_run_id": f"{fmt}-1"})
        assert out.version == "1" and out.alias_moved
        made[fmt] = Published(name, config, candidate, out)
    return made


@pytest.fixture
def registry(monkeypatch, mlflow_server):
    """MLflow's global tracking URI, as a consumer of the registry sets it."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    return mlflow_server


def _saved_model_specs(signature) -> list[tuple]:
    return [(s.key, np.dtype(s.dtype), tuple(-1 if d is None else d for d in s.shape))
            for s in signature.inputs]


@pytest.mark.parametrize("fmt", FORMATS)
def test_pyfunc_loads_the_champion_from_the_registry_and_predicts_as_the_original(
        published, source, registry, fmt):
    champion = published[fmt]
    model = mlflow.pyfunc.load_model(champion.uri)
    batch = make_inputs(read_signature(source), batch_size=32, seed=7)

    got = np.asarray(model.predict(batch)["output_0"])
    expected = load_runner(source)(batch)["output_0"]

    assert got.shape == expected.shape == (32, 5)
    if fmt == "savedmodel":  # a float rewrite: held to the optimize step's equivalence bound
        assert np.abs(got - expected).max() <= champion.config.optimize.atol
    else:  # a derived candidate: held to the gate's accuracy budget, as top-1 agreement
        agreement = np.mean(got.argmax(axis=1) == expected.argmax(axis=1))
        assert agreement >= 1 - champion.config.gate.max_accuracy_drop_abs
    schema = model.metadata.get_input_schema()
    assert [(s.name, s.type, s.shape) for s in schema.inputs] == _saved_model_specs(
        read_signature(source))


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_champion_lookup_finds_it_and_benchmarks_it_in_its_own_runtime(published, source,
                                                                          fmt):
    from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark

    champion = published[fmt]
    found = find_champion(champion.config)

    assert (found.version, found.format, found.runtime, found.candidate) == (
        champion.out.version, fmt, FORMATS[fmt], champion.candidate.label)
    assert found.digest == champion.candidate.digest  # the files as they were benchmarked
    if fmt == "tflite":  # the tuned thread count, from runtime_settings.json in the model
        settings = json.loads(Path(found.directory, "runtime_settings.json").read_text())
        assert found.num_threads == settings["num_threads"] >= 1
    result = run_benchmark(
        Subject.baseline(found.path, role="champion", label=found.label, format=found.format,
                         num_threads=found.num_threads),
        [Subject.candidate(source, label="input")],
        BenchmarkConfig(batch_sizes=(1,), warmup=1, min_runs=5, min_seconds=0.1))
    assert (result.baseline.format, result.baseline.runtime) == (fmt, FORMATS[fmt])


def test_a_registry_source_pulls_the_saved_model_inside_the_mlflow_model(published, tmp_path):
    from tfopt.components.steps.pull import pull

    champion = published["savedmodel"]
    config = config_from_mapping({"source": champion.uri, "workdir": str(tmp_path),
                                  "mlflow": champion.config.mlflow.model_dump()})

    pulled = pull(config)

    assert pulled.version == champion.out.version
    assert model_digest(pulled.path) == champion.candidate.digest


def test_a_litert_registry_source_is_refused_in_one_line(published, tmp_path):
    from tfopt.components.steps.pull import pull

    champion = published["tflite"]
    config = config_from_mapping({"source": champion.uri, "workdir": str(tmp_path),
                                  "mlflow": champion.config.mlflow.model_dump()})

    with pytest.raises(NotASavedModelError) as caught:
        pull(config)
    assert str(caught.value) == (
        f"{champion.uri} is an MLflow Model of a tflite model for ai-edge-litert, not a "
        f"SavedModel: tfopt optimizes SavedModels (register the source model)")


@pytest.mark.parametrize("fmt", FORMATS)
def test_mlflow_models_serve_answers_the_input_example_with_the_same_predictions(
        published, registry, tmp_path, fmt):
    champion = published[fmt]
    local = Path(mlflow.artifacts.download_artifacts(champion.uri, dst_path=str(tmp_path)))
    body = (local / "serving_input_example.json").read_bytes()
    loaded = mlflow.pyfunc.load_model(str(local))
    expected = np.asarray(loaded.predict(loaded.input_example)["output_0"])
    port = free_port()
    command = [str(BIN / "mlflow"), "models", "serve", "-m", champion.uri, "--env-manager",
               "local", "-h", "127.0.0.1", "-p", str(port)]

    with served(command, f"http://127.0.0.1:{port}/ping", tmp_path / "serve.log",
                SERVE_STARTUP_SECONDS, cwd=tmp_path,
                # as in an activated venv: the server runs the venv's uvicorn by name
                env={**os.environ, "MLFLOW_TRACKING_URI": registry,
                     "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}):
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())

    np.testing.assert_allclose(np.asarray(answer["predictions"]["output_0"]), expected,
                               rtol=1e-6, atol=1e-7)


# Screenshots outlive pytest's temporary directories: the gitignored work/ of the checkout.
SCREENSHOTS = Path(__file__).resolve().parents[1] / "work" / "test_artifacts" / "mlflow_ui"


def _browser():
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=BROWSER_FLAGS)
    return playwright, browser


def test_the_mlflow_ui_shows_the_verdict_the_candidates_table_and_a_chart(
        published, mlflow_server):
    champion = published["tflite"]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    verdict = f"PROMOTE {champion.candidate.label}: "
    playwright, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        # The model version page: the verdict line and the link to the report.
        page.goto(f"{mlflow_server}/#/models/{champion.name}/versions/{champion.out.version}")
        page.get_by_text(verdict).first.wait_for(timeout=60_000)
        assert page.get_by_text("accuracy drop").first.is_visible()
        page.screenshot(path=SCREENSHOTS / "model_version.png", full_page=True)
        # Its report link opens the run's report.html in MLflow's artifact viewer.
        link = page.get_by_role("link", name="Report").get_attribute("href")
        assert link.endswith(f"/runs/{champion.out.run_id}/artifactPath/report/report.html")
        page.goto(urllib.parse.urljoin(page.url, link))
        report = page.frame_locator("iframe.mlflow-html-iframe")
        heading = report.get_by_role("heading", name="Candidates")
        heading.wait_for(timeout=60_000)
        assert report.get_by_text(f"Gate: PROMOTE {champion.candidate.label}.").is_visible()
        table = report.locator("table", has=report.get_by_role("columnheader",
                                                               name="p50 speedup [CI]"))
        assert table.get_by_role("cell", name=champion.candidate.label).first.is_visible()
        chart = report.locator("img[alt='speedup.png']")
        chart.scroll_into_view_if_needed()
        assert chart.is_visible() and chart.evaluate("img => img.naturalWidth") > 100
        page.screenshot(path=SCREENSHOTS / "report_html.png")
    finally:
        browser.close()
        playwright.stop()
    print(f"screenshots: {SCREENSHOTS / 'model_version.png'} {SCREENSHOTS / 'report_html.png'}")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_its_requirements_alone_install_in_a_fresh_venv_and_run_it(published, source, registry,
                                                                    tmp_path, fmt):
    champion = published[fmt]
    local = Path(mlflow.artifacts.download_artifacts(champion.uri, dst_path=str(tmp_path)))
    batch = make_inputs(read_signature(source), batch_size=4, seed=3)
    np.save(tmp_path / "batch.npy", batch["image"])
    np.save(tmp_path / "expected.npy",
            mlflow.pyfunc.load_model(str(local)).predict(batch)["output_0"])
    venv = tmp_path / "venv"
    uv = str(BIN / "uv")
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True,
                   timeout=120)
    install = [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
               "-r", str(local / "requirements.txt")]
    # From uv's cache, which `make install` filled, when it holds everything; else the index.
    offline = subprocess.run([*install, "--offline"], capture_output=True, text=True,
                             timeout=900, check=False)
    if offline.returncode != 0:
        print(f"not all in uv's cache, installing from the index: {offline.stderr[-500:]}")
        subprocess.run(install, check=True, timeout=1800)
    script = (
        "import sys, numpy as np, mlflow.pyfunc\n"
        f"model = mlflow.pyfunc.load_model({str(local)!r})\n"
        f"out = model.predict({{'image': np.load({str(tmp_path / 'batch.npy')!r})}})\n"
        f"assert np.allclose(np.asarray(out['output_0']), np.load("
        f"{str(tmp_path / 'expected.npy')!r}), atol=1e-6)\n"
        "import importlib.util as u\n"
        "print(sorted(n for n in ('tensorflow', 'ai_edge_litert') if u.find_spec(n)))\n")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    # only its own runtime: a LiteRT model does not pull in TensorFlow
    assert done.stdout.strip() == {"savedmodel": "['tensorflow']",
                                   "tflite": "['ai_edge_litert']"}[fmt]
