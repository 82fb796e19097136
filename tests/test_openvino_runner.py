"""The OpenVINO runner: the SavedModel's signature read back from the IR, the thread count and the
precision asked for are the ones the CPU plugin compiles with, and a bad IR is one line naming
it."""

import json

import pytest
from converter_testing import assert_outputs_match_at_any_batch

from tfopt.optimizer.candidates.openvino.convert import convert_to_openvino
from tfopt.optimizer.errors import SourceNotFoundError
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.runtime import CorruptModelError, detect_format, load_runner, read_signature
from tfopt.optimizer.runtime.openvino import OpenVINORunner
from tfopt.optimizer.runtime.registry import model_files


@pytest.fixture(scope="module")
def ir(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("openvino_runner")
    return convert_to_openvino(model_dir("keras_cnn"), root / "model.xml", "fp32").path


def test_the_signature_is_the_savedmodels_and_the_weights_belong_to_the_model(ir, model_dir):
    assert detect_format(ir) == "openvino"
    assert read_signature(ir) == load_runner(ir).signature
    assert read_signature(ir).same_contract(get_signature(model_dir("keras_cnn")))
    assert model_files(ir) == [ir, ir.with_suffix(".bin")]  # what its size and digest cover


@pytest.mark.parametrize("threads", [1, 2])
def test_the_thread_count_asked_for_is_the_one_the_plugin_compiles_with(ir, threads):
    runner = load_runner(ir, num_threads=threads)
    assert isinstance(runner, OpenVINORunner)
    assert runner.num_threads == threads
    assert f"INFERENCE_NUM_THREADS={threads}" in runner.description
    assert (runner.format, runner.runtime) == ("openvino", "openvino")


def test_calls_in_any_batch_size_give_the_savedmodels_outputs(ir, model_dir):
    assert_outputs_match_at_any_batch(ir, model_dir("keras_cnn"))


def test_without_a_sidecar_the_plugins_own_default_precision_applies(ir, tmp_path):
    import openvino as ov

    for name in ("model.xml", "model.bin"):
        (tmp_path / name).write_bytes((ir.parent / name).read_bytes())
    default = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    assert load_runner(tmp_path / "model.xml").inference_precision == default
    sidecar = json.loads((ir.parent / "model.xml.json").read_text())
    sidecar["runtime"]["options"] = {"INFERENCE_PRECISION_HINT": "f32"}
    (tmp_path / "model.xml.json").write_text(json.dumps(sidecar))
    assert load_runner(tmp_path / "model.xml").inference_precision == "f32"


def test_a_corrupt_or_incomplete_ir_is_one_line_naming_it(ir, tmp_path):
    (tmp_path / "model.xml").write_text("<net>not an IR")
    (tmp_path / "model.bin").write_bytes(b"\0" * 16)
    with pytest.raises(CorruptModelError) as caught:
        load_runner(tmp_path / "model.xml")
    assert str(caught.value).startswith(f"cannot load OpenVINO model {tmp_path / 'model.xml'}: ")
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2
    (tmp_path / "model.xml").write_bytes(ir.read_bytes())
    (tmp_path / "model.bin").unlink()
    with pytest.raises(CorruptModelError, match="its weights model.bin are missing"):
        read_signature(tmp_path / "model.xml")
    with pytest.raises(SourceNotFoundError, match="no such OpenVINO model"):
        read_signature(tmp_path / "absent.xml")
