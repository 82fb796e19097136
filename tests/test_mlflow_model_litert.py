"""A LiteRT candidate as an MLflow Model: pyfunc through the loader shipped with the model.

Built on local disk (no tracking server). The loader runs without tfopt and without TensorFlow,
as where the model is served: checked in a Python that cannot import either.
"""

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version

import mlflow
import numpy as np
import pytest
from mlflow_model_testing import (
    image_batch,
    litert_candidate,
    mlmodel,
    one_thread_mlflow_model,
    requirement_names,
)

from tfopt.components.mlflow_models.mlmodel import recorded_format
from tfopt.components.mlflow_models.tfopt_litert_loader import _load_pyfunc
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.runtime import load_runner


@pytest.fixture(scope="module")
def built(model_dir, tmp_path_factory):
    source = model_dir("keras_cnn")
    candidate = litert_candidate(source, tmp_path_factory.mktemp("candidate") / "litert_fp32")
    return source, candidate, one_thread_mlflow_model(source, candidate, tmp_path_factory)



def test_the_model_is_pyfunc_with_the_loader_the_file_and_its_tuned_threads(built):
    _, candidate, model = built
    conf = mlmodel(model)

    assert set(conf["flavors"]) == {"python_function"}  # MLflow has no LiteRT flavor
    pyfunc = conf["flavors"]["python_function"]
    assert (pyfunc["loader_module"], pyfunc["code"], pyfunc["data"]) == (
        "tfopt_litert_loader", "code", "litert")
    assert pyfunc["config"] == {"model_file": "model.tflite", "signature": "serving_default",
                                "num_threads": 1}
    assert (model / "code" / "tfopt_litert_loader.py").is_file()
    assert model_digest(model / "litert") == candidate.digest  # the file and its sidecar
    assert conf["metadata"]["tfopt"]["artifact"] == "litert/model.tflite"
    assert recorded_format(model / "MLmodel", "here", TfoptError) == (
        "tflite", "ai-edge-litert", "litert/model.tflite")


def test_its_requirements_are_mlflows_pyfunc_and_litert_and_no_tensorflow(built):
    _, _, model = built

    assert requirement_names(model) == ["mlflow-skinny", "numpy", "pandas", "ai-edge-litert"]
    assert f"ai-edge-litert=={version('ai-edge-litert')}" in (model / "requirements.txt"
                                                             ).read_text().split()


def test_pyfunc_predicts_what_the_litert_interpreter_computes(built):
    _, candidate, model = built
    loaded = mlflow.pyfunc.load_model(str(model))
    runner = load_runner(candidate.path, format="tflite", num_threads=1)

    for batch in (loaded.input_example, image_batch(5)):
        predicted = loaded.predict(batch)
        assert set(predicted) == {"output_0"}
        np.testing.assert_array_equal(predicted["output_0"], runner(batch)["output_0"])
    # one input: a bare array is that input
    np.testing.assert_array_equal(loaded.predict(image_batch(2)["image"])["output_0"],
                                  runner(image_batch(2))["output_0"])


def test_threads_come_from_tuning_and_a_caller_may_override_them(built):
    _, _, model = built

    assert _load_pyfunc(str(model / "litert"), {"model_file": "model.tflite"}).num_threads >= 1
    assert _load_pyfunc(str(model / "litert"), {"num_threads": 3}).num_threads == 3
    overridden = mlflow.pyfunc.load_model(str(model), model_config={"num_threads": 2})
    assert overridden.model_config["num_threads"] == 2
    assert overridden.predict(image_batch(1))["output_0"].shape == (1, 5)


def test_concurrent_predictions_each_get_their_own_outputs(built):
    # The scoring server calls predict from a thread pool; one interpreter holds one set of
    # buffers, so unguarded calls would read each other's outputs.
    _, candidate, model = built
    loaded = mlflow.pyfunc.load_model(str(model))
    runner = load_runner(candidate.path, format="tflite", num_threads=1)
    batches = [image_batch(1 + i % 3, seed=i) for i in range(24)]

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(loaded.predict, batches))

    for batch, predicted in zip(batches, results):
        np.testing.assert_array_equal(predicted["output_0"], runner(batch)["output_0"])


def test_the_model_loads_and_predicts_without_tensorflow_and_without_tfopt(built, tmp_path):
    _, candidate, model = built
    expected = load_runner(candidate.path, format="tflite", num_threads=1)(image_batch(3))
    np.save(tmp_path / "expected.npy", expected["output_0"])
    script = textwrap.dedent(f"""
        import sys
        for blocked in ("tensorflow", "keras", "components", "optimizer"):
            sys.modules[blocked] = None  # importing any of them now fails
        import numpy as np
        import mlflow.pyfunc
        model = mlflow.pyfunc.load_model({str(model)!r})
        batch = {{"image": np.random.default_rng(0).standard_normal((3, 16, 16, 3), "float32")}}
        out = model.predict(batch)["output_0"]
        assert np.array_equal(out, np.load({str(tmp_path / "expected.npy")!r}))
        assert not any(name.split(".")[0] in ("tensorflow", "components", "optimizer")
                       for name, module in sys.modules.items() if module is not None)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, check=False)

    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-3000:]
