"""An ONNX candidate as an MLflow Model: MLflow's own onnx flavor, with the session options the
benchmark ran it with. Built on local disk; loaded with mlflow.pyfunc and mlflow.onnx."""

from importlib.metadata import version

import mlflow
import mlflow.onnx
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
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.runtime import load_runner


@pytest.fixture(scope="module")
def built(model_dir, tmp_path_factory):
    source = model_dir("keras_cnn")
    candidate = converted_candidate(source, tmp_path_factory.mktemp("candidate") / "onnx_fp32",
                                    "onnx")
    return source, candidate, one_thread_mlflow_model(source, candidate, tmp_path_factory)



def test_the_model_is_mlflows_onnx_flavor_with_the_benchmarks_session_options(built):
    _, candidate, model = built
    conf = mlmodel(model)

    assert set(conf["flavors"]) == {"onnx", "python_function"}
    assert conf["flavors"]["python_function"]["loader_module"] == "mlflow.onnx"
    assert conf["flavors"]["onnx"]["data"] == "model.onnx"
    assert conf["flavors"]["onnx"]["onnx_session_options"]["intra_op_num_threads"] == 1
    assert conf["flavors"]["onnx"]["onnx_session_options"]["extra_session_config"][
        "session.intra_op.allow_spinning"] == "0"
    assert model_digest(model / "model.onnx") == model_digest(candidate.path)
    assert (model / "model.onnx.json").is_file()
    assert recorded_format(model / "MLmodel", "here", TfoptError) == (
        "onnx", "onnxruntime", "model.onnx")


def test_its_requirements_are_mlflows_pyfunc_onnx_and_onnxruntime_and_no_tensorflow(built):
    _, _, model = built

    assert requirement_names(model) == ["mlflow-skinny", "numpy", "pandas", "onnx",
                                        "onnxruntime"]
    assert f"onnxruntime=={version('onnxruntime')}" in (model / "requirements.txt"
                                                       ).read_text().split()


def test_pyfunc_predicts_what_the_benchmarks_runner_computes(built):
    source, candidate, model = built
    loaded = mlflow.pyfunc.load_model(str(model))
    runner = load_runner(candidate.path, format="onnx", num_threads=1)
    stock = load_runner(source)

    for batch in (loaded.input_example, image_batch(5)):
        predicted = loaded.predict(batch)
        assert set(predicted) == {"output_0"}
        np.testing.assert_allclose(predicted["output_0"], runner(batch)["output_0"],
                                   rtol=1e-6, atol=1e-6)
        # and the SavedModel it came from, within a float32 conversion's rounding
        np.testing.assert_allclose(predicted["output_0"], stock(batch)["output_0"],
                                   rtol=1e-4, atol=1e-5)


def test_mlflow_onnx_loads_the_onnx_graph_itself(built):
    _, _, model = built
    graph = mlflow.onnx.load_model(str(model))

    assert [i.name for i in graph.graph.input] == ["image"]
