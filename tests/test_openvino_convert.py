"""SavedModel -> OpenVINO IR, each flavour: a real ``openvino.convert_model`` of a small Keras CNN,
NNCF's quantization, the IR read back and compiled by the CPU plugin with the precision its
sidecar records.

Tolerances: fp32 computes what the SavedModel computes within 1e-5 of softmax outputs (measured:
3e-8). bf16 keeps 8 significant bits and int8 quantizes: both stay within 0.05 of the float
outputs (measured: 3e-4 bf16, 1e-3 int8); their accuracy is held to the gate's budget on real
data in tests/test_runtime_candidates.py.
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
from tfopt.optimizer.candidates.openvino.convert import OpenVINOExport, convert_to_openvino
from tfopt.optimizer.errors import DestinationError, InvalidInputsError
from tfopt.optimizer.inputs.calibration import Calibration
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.system.cpu_features import cpu_supports_bf16

LOW_PRECISION_ATOL = 0.05
FLAVOURS = ["fp32", "int8"] + (["bf16"] if cpu_supports_bf16() else [])


@pytest.fixture(scope="module")
def converted(model_dir, tmp_path_factory):
    source = model_dir("keras_cnn")
    signature = get_signature(source)
    calibration = Calibration(tuple(make_inputs(signature, 1, seed=i) for i in range(16)),
                              "generated for the test")
    export = OpenVINOExport(source)
    root = tmp_path_factory.mktemp("openvino")
    return source, {flavour: convert_to_openvino(source, root / flavour / "model.xml", flavour,
                                                 calibration=calibration, export=export)
                    for flavour in FLAVOURS}


def test_each_flavour_is_an_ir_with_its_weights_and_a_sidecar_holding_its_precision(converted):
    _, models = converted
    precision = {"fp32": "f32", "bf16": "bf16", "int8": "f32"}
    for flavour, model in models.items():
        assert sorted(p.name for p in model.path.parent.iterdir()) == [
            "model.bin", "model.xml", "model.xml.json"]
        sidecar = json.loads(model.sidecar_path.read_text())
        assert (sidecar["format"], sidecar["flavour"], sidecar["file"]) == (
            "openvino", flavour, "model.xml")
        assert [f["name"] for f in sidecar["files"]] == ["model.xml", "model.bin"]
        assert sidecar["files"][1]["size_bytes"] == model.path.with_suffix(".bin").stat().st_size
        assert sidecar["runtime"]["options"] == {"INFERENCE_PRECISION_HINT": precision[flavour]}
        assert sidecar["outputs"] == [{"key": "output_0", "dtype": "float32",
                                       "shape": [None, 5]}]
        runner = load_runner(model.path)
        assert runner.inference_precision == precision[flavour]  # as the plugin reports it
    assert json.loads(models["int8"].sidecar_path.read_text())["calibration"] == {
        "samples": 16, "source": "generated for the test"}


def test_each_flavour_gives_the_savedmodels_outputs_within_its_precision(converted):
    source, models = converted
    reference = load_runner(source)
    feeds = make_inputs(reference.signature, 8, seed=5)
    expected = reference(feeds)["output_0"]
    for flavour, model in models.items():
        runner = load_runner(model.path)
        assert runner.signature.same_contract(reference.signature), flavour
        bound = FLOAT_ATOL if flavour == "fp32" else LOW_PRECISION_ATOL
        np.testing.assert_allclose(runner(feeds)["output_0"], expected, atol=bound,
                                   err_msg=flavour)


def test_int8_holds_quantize_nodes_and_fp32_none(converted):
    import openvino as ov

    _, models = converted
    ops = {f: {op.get_type_name() for op in ov.Core().read_model(str(m.path)).get_ops()}
           for f, m in models.items()}
    assert "FakeQuantize" in ops["int8"] and "FakeQuantize" not in ops["fp32"]


def test_the_sidecars_snippet_compiles_and_calls_the_model(converted):
    _, models = converted
    assert run_load_snippet(models["fp32"].path, "output_0") == "['output_0'] (1, 5)"


def test_another_signature_with_two_inputs_keeps_its_keys(model_dir, tmp_path):
    source = model_dir("tf_module_two_signatures")
    model = convert_to_openvino(source, tmp_path / "model.xml", "fp32", signature="calibrated")
    assert_keeps_the_calibrated_signature(source, model.path)


def test_a_model_openvino_cannot_convert_is_refused_with_the_op_named(model_dir, tmp_path):
    source = model_dir("igamma_module")
    with pytest.raises(ConversionError) as caught:
        convert_to_openvino(source, tmp_path / "model.xml", "fp32")
    assert str(caught.value) == (f"cannot convert {source} to OpenVINO: no OpenVINO "
                                 "conversion rule for: Igamma")
    assert caught.value.exit_code == 4
    assert not list(tmp_path.iterdir())


def test_int8_without_calibration_data_or_a_bad_destination_is_refused_first(model_dir,
                                                                             tmp_path):
    with pytest.raises(InvalidInputsError, match="^int8 needs calibration data"):
        convert_to_openvino(model_dir("keras_cnn"), tmp_path / "model.xml", "int8")
    with pytest.raises(DestinationError, match="must end in .xml"):
        convert_to_openvino(model_dir("keras_cnn"), tmp_path / "model.onnx", "fp32")
    assert not list(tmp_path.iterdir())
