"""SavedModel -> LiteRT in four flavours, on real models: each converts, keeps the serving
signature, stays within its stated error of the SavedModel, and (on the trained digits model)
within its stated top-1 drop; bad conversions fail in one line and leave nothing behind.

Bounds, on softmax outputs (measured when written, digits / keras_cnn):
fp32 1e-4 (7e-7 / 5e-8), fp16 2e-3 (4e-4 / 2e-5), dynamic_int8 3e-2 (7e-3 / keras_cnn's weights
are below the converter's 1024-element quantization threshold, so it stays float), full_int8
8e-2 (1.7e-2 / 2.7e-3). Digits held-out top-1 drop: fp32, fp16, dynamic_int8 at most 0.5 points
(measured 0, 0, -0.2); full_int8 at most 1.5 points (measured 0.0, calibrated on 100 rows).
"""

import hashlib
import json
import logging
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from tfopt.optimizer.candidates.litert.convert import (
    FLAVOURS,
    LiteRTConversionError,
    calibration_feeds,
    condense_converter_error,
    convert_to_litert,
)
from tfopt.optimizer.candidates.litert.manifest import read_manifest
from tfopt.optimizer.errors import DestinationError, InvalidInputsError
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.runtime.litert import LiteRTRunner
from tfopt.optimizer.tf_runtime import import_tensorflow
from tfopt.optimizer.verify.evaluation import top1_accuracy

# mixed_int8 with no float nodes is full int8 by the quantization debugger's route
MAX_ABS = {"fp32": 1e-4, "fp16": 2e-3, "dynamic_int8": 3e-2, "full_int8": 8e-2,
           "mixed_int8": 8e-2}
MAX_TOP1_DROP = {"fp32": 0.005, "fp16": 0.005, "dynamic_int8": 0.005, "full_int8": 0.015,
                 "mixed_int8": 0.015}


@pytest.fixture(scope="module")
def digits(tmp_path_factory, digits_model):
    trained = digits_model
    with np.load(trained.eval_data) as data:
        x, y = data["x"], data["y"]
    out = tmp_path_factory.mktemp("digits_litert")
    feeds = calibration_feeds(get_signature(trained.saved_model), x, 100)
    models = {f: convert_to_litert(trained.saved_model, out / f"digits_{f}.tflite", f,
                                   representative_data=feeds, source_digest="sha256:abc")
              for f in FLAVOURS}
    return SimpleNamespace(source=trained.saved_model, x=x, y=y, models=models)


@pytest.fixture(scope="module")
def cnn(model_dir, tmp_path_factory):
    source = model_dir("keras_cnn")
    x = np.random.default_rng(0).standard_normal((32, 16, 16, 3)).astype(np.float32)
    out = tmp_path_factory.mktemp("cnn_litert")
    feeds = calibration_feeds(get_signature(source), x, 32)
    models = {f: convert_to_litert(source, out / f"cnn_{f}.tflite", f, representative_data=feeds)
              for f in FLAVOURS}
    return SimpleNamespace(source=source, x=x, models=models)


@pytest.fixture(scope="module")
def det_model(tmp_path_factory):
    """MatrixDeterminant has no LiteRT builtin: it converts only with TF Select ops."""
    tf = import_tensorflow()

    class Det(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32, name="m")])
        def det(self, m):
            return {"det": tf.linalg.det(m)}

    module = Det()
    path = tmp_path_factory.mktemp("det") / "det_savedmodel"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.det})
    return path


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_flavour_keeps_the_signature_and_stays_within_its_error_bound(cnn, digits,
                                                                          flavour):
    for case in (cnn, digits):
        model = case.models[flavour]
        assert model.path.is_file() and model.manifest_path.is_file()
        saved, lite = load_runner(case.source), load_runner(model.path)
        assert lite.signature.same_contract(saved.signature), lite.signature.describe()
        key, out = saved.signature.input_keys[0], saved.signature.output_keys[0]
        gap = np.abs(lite({key: case.x})[out] - saved({key: case.x})[out]).max()
        assert gap <= MAX_ABS[flavour], f"{case.source.name} {flavour}: {gap:.3g}"


def test_quantized_flavours_are_smaller_than_fp32(digits):
    sizes = {f: m.manifest.size_bytes for f, m in digits.models.items()}
    assert sizes["fp16"] < 0.6 * sizes["fp32"]
    assert sizes["dynamic_int8"] < 0.35 * sizes["fp32"]
    assert sizes["full_int8"] < 0.35 * sizes["fp32"]
    for model in digits.models.values():
        assert model.path.stat().st_size == model.manifest.size_bytes


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_digits_held_out_top1_drops_no_more_than_the_flavours_budget(digits, flavour):
    baseline = top1_accuracy(load_runner(digits.source), digits.x, digits.y)
    accuracy = top1_accuracy(load_runner(digits.models[flavour].path), digits.x, digits.y)
    assert baseline > 0.9
    assert baseline - accuracy <= MAX_TOP1_DROP[flavour], (flavour, baseline, accuracy)


def test_sidecar_says_what_the_model_is_and_its_load_snippet_runs(digits):
    model = digits.models["full_int8"]
    data = read_manifest(model.manifest_path)
    assert model.manifest_path.name == "digits_full_int8.tflite.json"
    assert (data["format"], data["flavour"], data["file"]) == \
        ("litert", "full_int8", "digits_full_int8.tflite")
    assert data["source"] == {"path": str(digits.source), "digest": "sha256:abc"}
    assert data["signature"] == "serving_default"
    assert data["inputs"] == [{"key": "image", "dtype": "float32", "shape": [None, 8, 8, 1]}]
    assert data["outputs"] == [{"key": "output_0", "dtype": "float32", "shape": [None, 10]}]
    assert data["converter"]["tensorflow_version"] == import_tensorflow().__version__
    assert data["converter"]["supported_ops"] == ["TFLITE_BUILTINS_INT8", "TFLITE_BUILTINS"]
    assert data["calibration_samples"] == 100
    assert data["sha256"] == hashlib.sha256(model.path.read_bytes()).hexdigest()

    # Run as a user would: a fresh process, from the directory holding the model and sidecar
    # (the snippet names the model relative to it), without TensorFlow.
    check = "\nprint(sorted(outputs), outputs['output_0'].shape, outputs['output_0'].sum())\n"
    ran = subprocess.run([sys.executable, "-c", data["load"]["python"] + check],
                         cwd=model.path.parent, capture_output=True, text=True, timeout=60,
                         check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("['output_0'] (1, 10) ")
    assert abs(float(ran.stdout.split()[-1]) - 1.0) < 0.02  # a softmax


def test_a_model_with_an_op_litert_lacks_is_a_one_line_error_leaving_nothing(det_model,
                                                                             tmp_path, capfd):
    capfd.readouterr()
    with pytest.raises(LiteRTConversionError) as caught:
        convert_to_litert(det_model, tmp_path / "det.tflite", "dynamic_int8")
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400
    assert "dynamic_int8" in message and "MatrixDeterminant" in message
    assert "MatrixDeterminant" in caught.value.details  # the whole converter output is kept
    assert caught.value.exit_code == 4
    assert list(tmp_path.iterdir()) == []
    # The converter's pages of MLIR diagnostics stayed off the terminal.
    assert "MatrixDeterminant" not in capfd.readouterr().err


def test_a_successful_conversion_prints_and_warns_nothing_but_logs_at_debug(model_dir, tmp_path,
                                                                           capfd, caplog):
    source = model_dir("keras_cnn")
    feeds = [{"image": np.zeros((1, 16, 16, 3), np.float32)}]
    import_tensorflow()
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as warned, \
            caplog.at_level(logging.DEBUG, "tfopt.optimizer.candidates.litert.convert"):
        warnings.simplefilter("always")
        convert_to_litert(source, tmp_path / "cnn.tflite", "full_int8", representative_data=feeds)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
    assert warned == []
    # TF's calibrator warns that its own tf.lite.Interpreter is deprecated: logged, not shown.
    assert "tf.lite.Interpreter is deprecated" in caplog.text


def test_converter_errors_condense_to_their_first_meaningful_line():
    mlir = ("Could not translate MLIR to FlatBuffer.<unknown>:0: error: loc(callsite(fused["
            "\"Foo:\", \"Foo@f\"] at fused[\"Call:\", \"Call\"])): 'tf.Foo' op is neither a "
            "custom op nor a flex op\n<unknown>:0: note: loc(fused[\"Call:\"]): called from\n"
            "<unknown>:0: error: failed while converting: 'main': \n")
    assert condense_converter_error(mlir) == "'tf.Foo' op is neither a custom op nor a flex op"
    assert condense_converter_error("\n\nNone is only supported in the 1st dimension\nmore") \
        == "None is only supported in the 1st dimension"


def test_full_int8_needs_calibration_data_before_any_work(model_dir, tmp_path):
    source = model_dir("keras_cnn")
    with pytest.raises(InvalidInputsError, match="full_int8 needs calibration data"):
        convert_to_litert(source, tmp_path / "m.tflite", "full_int8")
    with pytest.raises(InvalidInputsError, match="dataset is empty"):
        convert_to_litert(source, tmp_path / "m.tflite", "full_int8", representative_data=[])
    with pytest.raises(InvalidInputsError, match="lacks input"):
        convert_to_litert(source, tmp_path / "m.tflite", "full_int8",
                          representative_data=[{"pixels": np.zeros((1, 16, 16, 3))}])
    assert list(tmp_path.iterdir()) == []


def test_bad_flavours_and_destinations_are_refused(model_dir, tmp_path):
    source = model_dir("keras_cnn")
    with pytest.raises(InvalidInputsError, match="unknown LiteRT flavour 'int4'"):
        convert_to_litert(source, tmp_path / "m.tflite", "int4")
    with pytest.raises(DestinationError, match="must end in .tflite"):
        convert_to_litert(source, tmp_path / "m.lite", "fp32")
    (tmp_path / "m.tflite").write_bytes(b"previous")
    with pytest.raises(DestinationError, match="already exists"):
        convert_to_litert(source, tmp_path / "m.tflite", "fp32")
    assert (tmp_path / "m.tflite").read_bytes() == b"previous"
    model = convert_to_litert(source, tmp_path / "m.tflite", "fp32", overwrite=True)
    assert model.path.read_bytes()[4:8] == b"TFL3"  # the flatbuffer's file identifier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tflite", "m.tflite.json"]
    assert json.loads(model.manifest_path.read_text())["flavour"] == "fp32"
    assert isinstance(load_runner(model.path), LiteRTRunner)
