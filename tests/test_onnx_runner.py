"""The ONNX Runtime runner: the SavedModel's signature read back from the file, the thread count
asked for is the one ONNX Runtime runs with, the sidecar's options are applied, and a bad file
or sidecar is one line naming it."""

import json

import pytest
from converter_testing import assert_outputs_match_at_any_batch

from tfopt.optimizer.candidates.onnx.convert import convert_to_onnx
from tfopt.optimizer.errors import SourceNotFoundError
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.model.sidecar import SidecarError
from tfopt.optimizer.runtime import CorruptModelError, detect_format, load_runner, read_signature
from tfopt.optimizer.runtime.onnx import OnnxRunner


@pytest.fixture(scope="module")
def onnx_file(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_runner")
    return convert_to_onnx(model_dir("keras_cnn"), root / "model.onnx", "fp32").path


def test_the_signature_is_the_savedmodels_and_the_format_is_found_by_suffix(onnx_file,
                                                                           model_dir):
    assert detect_format(onnx_file) == "onnx"
    assert read_signature(onnx_file) == load_runner(onnx_file).signature
    assert read_signature(onnx_file).same_contract(get_signature(model_dir("keras_cnn")))
    assert read_signature(onnx_file, "other_name").name == "other_name"


@pytest.mark.parametrize("threads", [1, 2])
def test_the_thread_count_asked_for_is_the_one_onnx_runtime_runs_with(onnx_file, threads):
    runner = load_runner(onnx_file, num_threads=threads)
    assert isinstance(runner, OnnxRunner)
    assert runner.num_threads == threads
    assert f"intra_op_num_threads={threads}" in runner.description
    assert (runner.format, runner.runtime) == ("onnx", "onnxruntime")


def test_a_pool_of_more_than_one_thread_spins_between_calls_and_one_thread_does_not(
        onnx_file):
    """ONNX Runtime's default, kept where there is a pool (tfopt.optimizer.runtime.onnx): put to
    sleep after each call, the workers cost more to wake than the second thread saves."""
    pooled, alone = load_runner(onnx_file, num_threads=2), load_runner(onnx_file, num_threads=1)
    config = "session.intra_op.allow_spinning"
    assert pooled._session.get_session_options().get_session_config_entry(config) == "1"
    assert alone._session.get_session_options().get_session_config_entry(config) == "0"
    assert pooled.description.endswith("intra_op_num_threads=2, spinning)")
    assert pooled.spins_after_call and not alone.spins_after_call
    assert "spinning" not in alone.description


def test_calls_in_any_batch_size_give_the_savedmodels_outputs(onnx_file, model_dir):
    assert_outputs_match_at_any_batch(onnx_file, model_dir("keras_cnn"))


def test_the_sidecars_optimization_level_is_what_the_session_loads_with(onnx_file, tmp_path):
    copy = tmp_path / "model.onnx"
    copy.write_bytes(onnx_file.read_bytes())
    sidecar = json.loads((onnx_file.parent / "model.onnx.json").read_text())
    sidecar["runtime"]["options"] = {"graph_optimization_level": "ORT_DISABLE_ALL"}
    (tmp_path / "model.onnx.json").write_text(json.dumps(sidecar))
    assert "ORT_DISABLE_ALL" in load_runner(copy).description

    sidecar["runtime"]["options"] = {"graph_optimization_level": "ORT_TURBO"}
    (tmp_path / "model.onnx.json").write_text(json.dumps(sidecar))
    with pytest.raises(CorruptModelError, match="unknown graph_optimization_level 'ORT_TURBO'"):
        load_runner(copy)

    (tmp_path / "model.onnx.json").write_text(json.dumps({**sidecar, "format": "openvino"}))
    with pytest.raises(SidecarError, match="describes a model in format 'openvino', not 'onnx'"):
        read_signature(copy)


def test_a_corrupt_or_missing_file_is_one_line_naming_it(tmp_path):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07not a protobuf" * 50)
    with pytest.raises(CorruptModelError) as caught:
        load_runner(corrupt)
    assert str(caught.value).startswith(f"cannot load ONNX model {corrupt}: ")
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2
    with pytest.raises(SourceNotFoundError, match="no such ONNX model"):
        read_signature(tmp_path / "absent.onnx")
