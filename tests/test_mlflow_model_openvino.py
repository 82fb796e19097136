"""An OpenVINO candidate as an MLflow Model: pyfunc through the loader shipped with the model,
compiled with the precision it was measured with. Built on local disk (no tracking server)."""

import subprocess
import sys
import textwrap
from importlib.metadata import version

import mlflow
import numpy as np
import pytest
from mlflow_model_testing import (
    converted_candidate,
    image_batch,
    mlmodel,
    one_thread_mlflow_model,
    requirement_names,
)

from tfopt.components.mlflow_models.mlmodel import recorded_format
from tfopt.components.mlflow_models.tfopt_openvino_loader import _load_pyfunc
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.runtime import load_runner


@pytest.fixture(scope="module")
def built(model_dir, tmp_path_factory):
    source = model_dir("keras_cnn")
    candidate = converted_candidate(
        source, tmp_path_factory.mktemp("candidate") / "openvino_fp32", "openvino")
    return source, candidate, one_thread_mlflow_model(source, candidate, tmp_path_factory)



def test_the_model_is_pyfunc_with_the_loader_the_ir_its_precision_and_threads(built):
    _, candidate, model = built
    conf = mlmodel(model)

    assert set(conf["flavors"]) == {"python_function"}  # MLflow has no OpenVINO flavor
    pyfunc = conf["flavors"]["python_function"]
    assert (pyfunc["loader_module"], pyfunc["code"], pyfunc["data"]) == (
        "tfopt_openvino_loader", "code", "openvino")
    assert pyfunc["config"]["model_file"] == "model.xml"
    assert pyfunc["config"]["num_threads"] == 1
    # the fp32 candidate was measured in f32: without the hint a bf16 CPU would run it in bf16
    assert pyfunc["config"]["compile_options"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert model_digest(model / "openvino") == candidate.digest
    assert recorded_format(model / "MLmodel", "here", TfoptError) == (
        "openvino", "openvino", "openvino/model.xml")


def test_its_requirements_are_mlflows_pyfunc_and_openvino_and_no_tensorflow(built):
    _, _, model = built

    assert requirement_names(model) == ["mlflow-skinny", "numpy", "pandas", "openvino"]
    assert f"openvino=={version('openvino')}" in (model / "requirements.txt").read_text().split()


def test_pyfunc_predicts_what_the_benchmarks_runner_computes(built):
    source, candidate, model = built
    loaded = mlflow.pyfunc.load_model(str(model))
    runner = load_runner(candidate.path, format="openvino", num_threads=1)
    stock = load_runner(source)

    for batch in (loaded.input_example, image_batch(5)):
        predicted = loaded.predict(batch)
        assert set(predicted) == {"output_0"}
        np.testing.assert_allclose(predicted["output_0"], runner(batch)["output_0"],
                                   rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(predicted["output_0"], stock(batch)["output_0"],
                                   rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loaded.predict(image_batch(2)["image"])["output_0"],
                               runner(image_batch(2))["output_0"], rtol=1e-6, atol=1e-6)


def test_threads_come_from_tuning_and_a_caller_may_override_them(built):
    _, _, model = built

    assert _load_pyfunc(str(model / "openvino"), {"num_threads": 2}).num_threads == 2
    overridden = mlflow.pyfunc.load_model(str(model), model_config={"num_threads": 2})
    assert overridden.predict(image_batch(1))["output_0"].shape == (1, 5)


def test_the_model_loads_and_predicts_without_tensorflow_and_without_tfopt(built, tmp_path):
    _, candidate, model = built
    expected = load_runner(candidate.path, format="openvino", num_threads=1)(image_batch(3))
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
        np.testing.assert_allclose(out, np.load({str(tmp_path / "expected.npy")!r}),
                                   rtol=1e-6, atol=1e-6)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, check=False)

    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-3000:]
