"""Inputs are sized against the memory budget before they are made or read: a signature that
declares 6 GiB, a batch size of 400 million, an .npz whose header declares 11 GiB. Each is
exit 7 in one line with the estimate, through ``tfopt run``, before the memory is taken."""

import subprocess
import time
import zipfile

import numpy as np
import pytest
from cli_testing import TFOPT, assert_clean_failure, run_tfopt

from tfopt.optimizer.inputs.data_files import npz_member_bytes, read_npz
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.inputs.sizing import generated_bytes
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget, MemoryBudgetError
from tfopt.optimizer.system.process_tree import TreeMeter


def _config(tmp_path, source, sections: str = "") -> str:
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"source: {source}\nworkdir: {tmp_path / 'work'}\n"
        "resources: {memory_gb: 4}\ntuning: {enabled: false}\n"
        f"mlflow: {{tracking_uri: 'sqlite:///{tmp_path / 'mlflow.db'}', experiment: limits, "
        "registered_model: limits}\n" + sections)
    return str(config)


def _signature(*specs: tuple[str, str, tuple]) -> SignatureInfo:
    return SignatureInfo("serving_default",
                         tuple(TensorSpecInfo(k, f"{k}:0", d, s) for k, d, s in specs), (), "")


def test_a_declared_40000_by_40000_input_is_exit_7_within_a_minute_and_the_tree_under_1_gib(
        tmp_path, model_dir):
    config = _config(tmp_path, model_dir("huge_declared_input"))
    started = time.monotonic()
    child = subprocess.Popen([str(TFOPT), "run", "--config", config], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with TreeMeter(interval=0.05, pid=child.pid) as meter:  # tfopt's tree, not this process
        stdout, stderr = child.communicate(timeout=60)
    assert time.monotonic() - started < 60
    result = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    # 40000 * 40000 float32: 6.0 GiB against the 4.0 GiB budget, named in the one line
    assert_clean_failure(result, 7, "'x' [1, 40000, 40000] float32", "6.0 GiB",
                         "4.0 GiB (resources.memory_gb)")
    assert meter.peak is not None and meter.peak < GIB, meter.peak


def test_a_batch_size_of_400_million_is_exit_7_with_the_estimate(tmp_path, model_dir):
    # keras_cnn's input is [batch, 16, 16, 3] float32: 3 KiB a row, 1.1 TiB at that batch
    config = _config(tmp_path, model_dir("keras_cnn"),
                     "benchmark: {batch_sizes: [1, 400000000]}\n")
    result = run_tfopt("run", "--config", config, timeout=60)
    assert_clean_failure(result, 7, "at batch 400000000", "[400000000, 16, 16, 3] float32",
                         "1144.4 GiB")


def _npz_declaring(path, shape, dtype="<f4") -> None:
    """An .npz whose ``x.npy`` header declares ``shape`` and whose data is 16 bytes, beside
    an honest ``y``: a few hundred bytes on disk, whatever the header says."""
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("x.npy", "w") as member:
            np.lib.format.write_array_header_1_0(member, header)
            member.write(b"\0" * 16)
        with archive.open("y.npy", "w") as member:
            np.lib.format.write_array(member, np.zeros(4, np.int64))


def test_an_npz_member_is_sized_from_its_header_without_reading_it(tmp_path):
    path = tmp_path / "declares.npz"
    _npz_declaring(path, (11 * GIB // 4,))
    assert path.stat().st_size < 2000
    assert npz_member_bytes(path) == {"x": 11 * GIB, "y": 32}
    with pytest.raises(MemoryBudgetError, match=r"'x' of 11\.0 GiB\) needs an estimated 11\.0 GiB"):
        read_npz(path, MemoryBudget(4 * GIB, "test"))
    # an honest archive within the budget reads as before
    np.savez(tmp_path / "honest.npz", x=np.ones((3, 2), np.float32))
    assert read_npz(tmp_path / "honest.npz", MemoryBudget(4 * GIB, "test"))["x"].shape == (3, 2)


def test_an_npz_whose_header_declares_11_gib_is_exit_7_before_it_is_read(tmp_path, model_dir):
    data = tmp_path / "eval.npz"
    _npz_declaring(data, (11 * GIB // 4 // (16 * 16 * 3), 16, 16, 3))
    config = _config(tmp_path, model_dir("keras_cnn"), f"evaluation: {{data: {data}}}\n")
    result = run_tfopt("run", "--config", config, timeout=120)
    # read, it would be exit 2 (the data is 16 bytes): 7 says it was refused from the header
    assert_clean_failure(result, 7, f"reading {data}", "'x' of 11.0 GiB", "4.0 GiB")


def test_generated_inputs_are_drawn_without_a_float64_copy_and_sized_as_made():
    signature = _signature(("x", "float32", (None, 256, 256)), ("ids", "int32", (None, 4)),
                           ("half", "float16", (None, 8)))
    feeds = make_inputs(signature, batch_size=4)
    assert feeds["x"].dtype == np.float32 and feeds["x"].shape == (4, 256, 256)
    assert feeds["half"].dtype == np.float16
    made = sum(a.nbytes for a in feeds.values())
    # the estimate counts the int64 draws cast to int32 and float16's float32 draw on top
    assert made <= generated_bytes(signature, 4) <= made + 4 * 4 * 8 + 4 * 8 * 4
    with pytest.raises(MemoryBudgetError, match=r"at batch 4 \(the largest: 'x' \[4, 256, 256\]"):
        make_inputs(signature, batch_size=4, budget=MemoryBudget(GIB // 1024, "test"))
