"""A SavedModel candidate as an MLflow Model: the tensorflow flavor, loaded back by MLflow itself.

Built on local disk (no tracking server): what publish uploads into a logged model.
tests/test_published_models.py loads the same through a registry, a server and a fresh venv.
"""

import json
from importlib.metadata import version

import mlflow
import numpy as np
import pytest
from mlflow_model_testing import mlmodel, requirement_names, savedmodel_candidate

from tfopt.components.mlflow_models import write_mlflow_model
from tfopt.components.mlflow_models.mlmodel import recorded_format
from tfopt.components.mlflow_models.registry import UnsupportedFormatError
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.runtime import load_runner, read_signature


@pytest.fixture(scope="module")
def built(model_dir, tmp_path_factory):
    source = model_dir("keras_cnn")
    settings = tmp_path_factory.mktemp("tuned") / "runtime_settings.json"
    settings.write_text(json.dumps({"intra_op_threads": 2, "inter_op_threads": 1,
                                    "num_threads": None}))
    destination = tmp_path_factory.mktemp("mlflow_model") / "optimized"
    write_mlflow_model(savedmodel_candidate(source), read_signature(source), destination,
                       runtime_settings=settings)
    return source, destination


def test_the_model_is_the_tensorflow_flavor_over_the_unchanged_saved_model(built):
    source, model = built
    conf = mlmodel(model)

    assert conf["flavors"]["tensorflow"] == {
        "saved_model_dir": "saved_model", "meta_graph_tags": ["serve"],
        "signature_def_key": "serving_default", "model_type": "tf1-estimator", "code": None}
    assert conf["flavors"]["python_function"]["loader_module"] == "mlflow.tensorflow"
    assert conf["metadata"]["tfopt"] == {"format": "savedmodel", "runtime": "tensorflow",
                                         "artifact": "saved_model", "candidate": "optimized",
                                         "signature": "serving_default"}
    assert model_digest(model / "saved_model") == model_digest(source)  # not re-saved
    assert json.loads((model / "runtime_settings.json").read_text())["intra_op_threads"] == 2
    # the champion lookup and a models:/ source read it back the same way
    assert recorded_format(model / "MLmodel", "here", TfoptError) == (
        "savedmodel", "tensorflow", "saved_model")


def test_its_signature_is_the_saved_models_names_dtypes_and_shapes(built):
    source, model = built
    signature = mlflow.models.Model.load(str(model / "MLmodel")).signature

    saved = read_signature(source)

    def specs(schema):
        return [(s.name, s.type, s.shape) for s in schema.inputs]

    def saved_specs(tensors):
        return [(t.key, np.dtype(t.dtype), tuple(-1 if d is None else d for d in t.shape))
                for t in tensors]

    assert specs(signature.inputs) == saved_specs(saved.inputs) == [
        ("image", np.dtype("float32"), (-1, 16, 16, 3))]
    assert specs(signature.outputs) == saved_specs(saved.outputs) == [
        ("output_0", np.dtype("float32"), (-1, 5))]


def test_its_requirements_are_mlflows_pyfunc_and_tensorflow_pinned(built):
    _, model = built
    lines = (model / "requirements.txt").read_text().split()

    assert requirement_names(model) == ["mlflow-skinny", "numpy", "pandas", "tensorflow-cpu"]
    assert f"tensorflow-cpu=={version('tensorflow-cpu')}" in lines
    assert f"mlflow-skinny=={version('mlflow-skinny')}" in lines


def test_pyfunc_predicts_what_the_saved_model_computes_on_its_input_example(built):
    source, model = built
    loaded = mlflow.pyfunc.load_model(str(model))
    example = loaded.input_example

    predicted = loaded.predict(example)

    assert set(example) == {"image"} and example["image"].shape == (1, 16, 16, 3)
    expected = load_runner(source)(example)
    np.testing.assert_allclose(np.asarray(predicted["output_0"]), expected["output_0"],
                               atol=1e-6)
    batch = {"image": np.random.default_rng(1).standard_normal((4, 16, 16, 3), "float32")}
    np.testing.assert_allclose(np.asarray(loaded.predict(batch)["output_0"]),
                               load_runner(source)(batch)["output_0"], atol=1e-6)


def test_an_input_that_breaks_the_signature_is_refused_by_mlflow(built):
    _, model = built
    loaded = mlflow.pyfunc.load_model(str(model))

    with pytest.raises(mlflow.exceptions.MlflowException, match="image"):
        loaded.predict({"image": np.zeros((1, 8, 8, 3), "float32")})


def test_a_format_without_a_flavor_module_is_one_line_naming_it(model_dir, tmp_path):
    from dataclasses import replace

    candidate = replace(savedmodel_candidate(model_dir("keras_cnn")), format="torchscript")

    with pytest.raises(UnsupportedFormatError) as caught:
        write_mlflow_model(candidate, read_signature(model_dir("keras_cnn")), tmp_path / "m")
    assert str(caught.value).startswith(
        "cannot log a 'torchscript' model as an MLflow Model: tfopt knows the flavors of "
        "savedmodel, tflite")
    assert not (tmp_path / "m").exists()
