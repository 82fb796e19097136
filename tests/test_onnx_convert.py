"""SavedModel -> ONNX, each flavour: a real tf2onnx conversion of a small Keras CNN, ONNX Runtime's
offline optimization and quantizers, the written file read back by ONNX Runtime.

Tolerances: the float flavours compute what the SavedModel computes, in another order, so they
agree within 1e-5 of softmax outputs (measured: 5e-8). The int8 flavours are held to the gate's
accuracy budget on real data (tests/test_runtime_candidates.py), not here; here they only have
to run and stay within 0.05 of the float outputs (measured: 3e-3 static).
"""

import json

import numpy as np
import pytest
from converter_testing import (
    FLOAT_ATOL,
    assert_keeps_the_calibrated_signature,
    run_load_snippet,
)

from tfopt.optimizer.candidates.conversion import ConversionError
from tfopt.optimizer.candidates.onnx.convert import FLAVOURS, OnnxExport, convert_to_onnx
from tfopt.optimizer.errors import DestinationError, InvalidInputsError
from tfopt.optimizer.inputs.calibration import Calibration
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.runtime import load_runner

INT8_ATOL = 0.05


PRE_PROCESSED: list[str] = []  # the models the fixture's conversions pre-processed


@pytest.fixture(scope="module")
def converted(model_dir, tmp_path_factory):
    from onnxruntime.quantization import shape_inference

    source = model_dir("keras_cnn")
    signature = get_signature(source)
    calibration = Calibration(tuple(make_inputs(signature, 1, seed=i) for i in range(16)),
                              "generated for the test")
    export = OnnxExport(source)
    root = tmp_path_factory.mktemp("onnx")
    pre_process = shape_inference.quant_pre_process

    def counted(src, *args, **kwargs):
        PRE_PROCESSED.append(str(src))
        return pre_process(src, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shape_inference, "quant_pre_process", counted)
        return source, {flavour: convert_to_onnx(source, root / flavour / "model.onnx",
                                                 flavour, calibration=calibration,
                                                 export=export, source_digest="sha256:abc")
                        for flavour in FLAVOURS}


def test_each_flavour_is_a_file_with_a_sidecar_saying_what_it_is(converted):
    source, models = converted
    for flavour, model in models.items():
        assert sorted(p.name for p in model.path.parent.iterdir()) == [
            "model.onnx", "model.onnx.json"]
        sidecar = json.loads(model.sidecar_path.read_text())
        assert (sidecar["format"], sidecar["flavour"], sidecar["file"]) == (
            "onnx", flavour, "model.onnx")
        assert sidecar["files"][0]["size_bytes"] == model.path.stat().st_size
        assert sidecar["source"] == {"path": str(source), "digest": "sha256:abc"}
        assert sidecar["inputs"] == [{"key": "image", "dtype": "float32",
                                      "shape": [None, 16, 16, 3]}]
        assert sidecar["converter"]["tf2onnx_version"]
        assert sidecar["runtime"] == {"package": "onnxruntime",
                                      "options": {"graph_optimization_level": "ORT_ENABLE_ALL"}}
    assert json.loads(models["static_int8"].sidecar_path.read_text())["calibration"] == {
        "samples": 16, "source": "generated for the test"}
    assert json.loads(models["fp32"].sidecar_path.read_text())["calibration"] is None
    assert json.loads(models["optimized"].sidecar_path.read_text())["converter"][
        "graph_optimization_level"] == "ORT_ENABLE_EXTENDED"


def test_the_float_flavours_give_the_savedmodels_outputs_and_int8_stays_close(converted):
    source, models = converted
    reference = load_runner(source)
    feeds = make_inputs(reference.signature, 8, seed=5)
    expected = reference(feeds)["output_0"]
    for flavour, model in models.items():
        runner = load_runner(model.path)
        assert runner.signature.same_contract(reference.signature), flavour
        got = runner(feeds)["output_0"]
        bound = INT8_ATOL if flavour.endswith("int8") else FLOAT_ATOL
        np.testing.assert_allclose(got, expected, atol=bound, err_msg=flavour)


def test_the_quantized_flavours_really_hold_int8(converted):
    import onnx

    _, models = converted
    ops = {flavour: {n.op_type for n in onnx.load(str(m.path)).graph.node}
           for flavour, m in models.items()}
    assert "QuantizeLinear" in ops["static_int8"] and "DequantizeLinear" in ops["static_int8"]
    # dynamic: the Dense layer's MatMul in int8; convolutions left float (ConvInteger is slow)
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops["dynamic_int8"]
    assert "ConvInteger" not in ops["dynamic_int8"] and "Conv" in ops["dynamic_int8"]
    assert not ops["fp32"] & {"QuantizeLinear", "DynamicQuantizeLinear"}


def test_both_int8_flavours_start_from_one_pre_processing_of_the_shared_conversion(converted):
    assert len(PRE_PROCESSED) == 1, PRE_PROCESSED


def test_the_sidecars_snippet_loads_and_calls_the_model(converted):
    _, models = converted
    assert run_load_snippet(models["optimized"].path, "output_0") == "['output_0'] (1, 5)"


def test_another_signature_with_two_inputs_keeps_its_keys(model_dir, tmp_path):
    source = model_dir("tf_module_two_signatures")
    model = convert_to_onnx(source, tmp_path / "model.onnx", "fp32", signature="calibrated")
    assert_keeps_the_calibrated_signature(source, model.path)


def test_a_model_tf2onnx_cannot_convert_is_refused_with_the_op_named(model_dir, tmp_path):
    export = OnnxExport(model_dir("igamma_module"))
    for flavour in ("fp32", "optimized"):
        with pytest.raises(ConversionError) as caught:
            convert_to_onnx(model_dir("igamma_module"), tmp_path / flavour / "model.onnx",
                            flavour, export=export)
        assert str(caught.value) == (f"cannot convert {model_dir('igamma_module')} to ONNX: "
                                     "tf2onnx has no ONNX conversion for Igamma")
        assert caught.value.exit_code == 4 and "Igamma" in caught.value.details
    assert not list(tmp_path.rglob("*.onnx*"))


def test_static_int8_without_calibration_data_is_refused_before_converting(model_dir,
                                                                           tmp_path):
    with pytest.raises(InvalidInputsError, match="^static_int8 needs calibration data"):
        convert_to_onnx(model_dir("keras_cnn"), tmp_path / "model.onnx", "static_int8")
    with pytest.raises(DestinationError, match="must end in .onnx"):
        convert_to_onnx(model_dir("keras_cnn"), tmp_path / "model.bin", "fp32")
    with pytest.raises(InvalidInputsError, match="unknown ONNX flavour 'fp8'"):
        convert_to_onnx(model_dir("keras_cnn"), tmp_path / "model.onnx", "fp8")
    assert not list(tmp_path.iterdir())


def test_keras_exact_gelu_converts_and_onnx_runtime_gives_the_savedmodels_outputs(tmp_path):
    """Keras writes exact GELU with Erfc, which ONNX has no op for: it reaches tf2onnx as Erf."""
    import keras

    keras.utils.set_random_seed(0)
    tokens = keras.Input((4, 8), name="tokens")
    hidden = keras.layers.Dense(16, activation="gelu", bias_initializer="random_normal")(tokens)
    source = tmp_path / "gelu"
    keras.Model(tokens, keras.layers.Dense(3)(hidden)).export(str(source), verbose=False)

    model = convert_to_onnx(source, tmp_path / "model.onnx", "fp32")
    feeds = make_inputs(get_signature(source), 2, seed=0)
    feeds = {key: value * 3 for key, value in feeds.items()}  # reach GELU's curved part
    expected = load_runner(source)(feeds)
    actual = load_runner(model.path)(feeds)
    for key, value in expected.items():
        np.testing.assert_allclose(actual[key], value, atol=FLOAT_ATOL, err_msg=key)
