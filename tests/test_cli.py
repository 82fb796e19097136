"""tfopt inspect / freeze on real models, in-process through the CLI's main()."""

import json

import numpy as np

from tfopt.components.cli import main
from tfopt.optimizer.model.savedmodel import list_signatures
from tfopt.optimizer.verify.equivalence import compare


def test_inspect_lists_signatures_ops_size_and_variables(model_dir, capsys):
    assert main(["inspect", str(model_dir("tf_module_two_signatures"))]) == 0
    out = capsys.readouterr().out
    assert "serving_default(features: float32(None, 4)) -> {scores: float32(None, 3)}" in out
    assert "calibrated(features: float32(None, 4), temperature: float32())" in out
    assert "variables    2" in out
    assert "MatMul" in out and "size" in out


def test_inspect_json_is_machine_readable(model_dir, capsys):
    assert main(["inspect", "--json", str(model_dir("keras_cnn"))]) == 0
    info = json.loads(capsys.readouterr().out)
    sig = info["signatures"]["serving_default"]
    assert sig["inputs"][0] == {"key": "image", "tensor": sig["inputs"][0]["tensor"],
                                "dtype": "float32", "shape": [None, 16, 16, 3]}
    assert info["op_counts"]["Conv2D"] >= 2
    assert info["variable_count"] > 0 and info["size_bytes"] > 0


def test_freeze_writes_an_equivalent_savedmodel(model_dir, tmp_path, capsys):
    src, dst = model_dir("keras_token_attention"), tmp_path / "frozen"
    assert main(["freeze", str(src), str(dst)]) == 0
    out = capsys.readouterr().out
    assert "equivalence  max abs diff" in out and f"wrote        {dst}" in out
    assert list_signatures(dst)["serving_default"].same_contract(
        list_signatures(src)["serving_default"])
    assert compare(src, dst).max_abs_diff <= 1e-5


def test_freeze_a_named_signature(model_dir, tmp_path):
    src, dst = model_dir("tf_module_two_signatures"), tmp_path / "calibrated"
    assert main(["freeze", str(src), str(dst), "--signature", "calibrated"]) == 0
    assert list(list_signatures(dst)) == ["calibrated"]
    feeds = {"features": np.ones((2, 4), np.float32), "temperature": np.float32(2.0)}
    report = compare(src, dst, inputs=feeds, signature_name="calibrated")
    assert report.max_abs_diff <= 1e-6


def test_overwrite_replaces_the_destination(model_dir, tmp_path):
    dst = tmp_path / "frozen"
    dst.mkdir()
    (dst / "stale.txt").write_text("old")
    assert main(["freeze", str(model_dir("tf1_saved_model")), str(dst), "--overwrite"]) == 0
    assert not (dst / "stale.txt").exists()
    assert (dst / "saved_model.pb").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["frozen"]
