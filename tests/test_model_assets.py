"""The model scan accepts a vocabulary table filled from the model's own ``assets/`` file, and
still refuses one that reads any other path (exit 5, one line, nothing written).

The accepted models are real exports (TF2 ``tf.saved_model.save``, TF1 ``Builder`` with an
assets collection); the refused ones are the same model after the surgery an attacker would do:
the asset's recorded name climbing out (``..``) or absolute, the asset file a link out of the
model, the initializer fed a constant path by its caller, the asset-path variable assigned a
constant path, and a TF1 initializer reading a path that is no asset at all.
"""

import os
import shutil
from pathlib import Path

import pytest
import string_models
from cli_testing import error_lines

from tfopt.optimizer.errors import DangerousOpError
from tfopt.optimizer.graph.rewrite import make_const
from tfopt.optimizer.model.assets import TEXT_FILE_TABLE_OPS, resolve_asset
from tfopt.optimizer.model.op_scan import find_dangerous_ops
from tfopt.optimizer.model.savedmodel import read_saved_model_proto
from tfopt.optimizer.tf_runtime import import_tensorflow

tf = import_tensorflow()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("assets")
    string_models.asset_vocabulary_lookup(root / "own", vocabulary=["a", "b", "c"])
    outside = root / "outside.txt"
    outside.write_text("a\nb\nc\n")
    return root


def _proto(path: Path):
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((path / "saved_model.pb").read_bytes())
    return proto


def _altered(models: Path, name: str, alter) -> Path:
    """A copy of the own-asset model with ``alter(meta_graph, copy)`` applied."""
    copy = models / name
    shutil.copytree(models / "own", copy)
    proto = _proto(copy)
    alter(proto.meta_graphs[0], copy)
    (copy / "saved_model.pb").write_bytes(proto.SerializeToString())
    return copy


def _refused_ops(path: Path) -> list[str]:
    return [f.op for f in find_dangerous_ops(_proto(path), root=path)]


def test_an_own_asset_vocabulary_is_accepted_only_when_the_model_directory_is_known(models):
    own = models / "own"
    assert read_saved_model_proto(own) is not None  # the scan every reader goes through
    assert _refused_ops(own) == []
    # Without the directory nothing can be proved: the op is refused as before.
    assert [f.op for f in find_dangerous_ops(_proto(own))] == ["InitializeTableFromTextFileV2"]


def _rename_asset(new_name):
    def alter(meta_graph, copy):
        meta_graph.asset_file_def[0].filename = new_name(copy)
    return alter


def _link_asset_out(meta_graph, copy):
    asset = copy / "assets" / meta_graph.asset_file_def[0].filename
    asset.unlink()
    asset.symlink_to(copy.parent / "outside.txt")


def _feed_initializer_a_constant(meta_graph, copy):
    functions = {f.signature.name: f for f in meta_graph.graph_def.library.function}
    call = next(n for n in meta_graph.graph_def.node if "f" in n.attr and any(
        m.op in TEXT_FILE_TABLE_OPS for m in functions[n.attr["f"].func.name].node_def))
    meta_graph.graph_def.node.append(make_const("hostile_path",
                                                _path_array(copy.parent / "outside.txt")))
    call.input[0] = "hostile_path"


def _assign_variable_a_constant(meta_graph, copy):
    assign = next(n for n in meta_graph.graph_def.node if n.op == "AssignVariableOp")
    meta_graph.graph_def.node.append(make_const("hostile_path",
                                                _path_array(copy.parent / "outside.txt")))
    assign.input[1] = "hostile_path"


def _path_array(path):
    import numpy as np

    return np.array(str(path).encode(), dtype=object)


SURGERIES = {
    "dot_dot_name": _rename_asset(lambda copy: "../../outside.txt"),
    "absolute_name": _rename_asset(lambda copy: str(copy.parent / "outside.txt")),
    "link_out_of_the_model": _link_asset_out,
    "caller_feeds_a_constant_path": _feed_initializer_a_constant,
    "asset_variable_assigned_a_constant": _assign_variable_a_constant,
}


@pytest.mark.parametrize("surgery", sorted(SURGERIES))
def test_a_table_file_outside_the_model_is_refused(models, surgery):
    altered = _altered(models, surgery, SURGERIES[surgery])
    assert _refused_ops(altered) == ["InitializeTableFromTextFileV2"]


def _tf1_table_model(path: Path, vocabulary: Path, register_asset: bool) -> Path:
    def initializer():
        filename = tf.constant(str(vocabulary), name="vocabulary_path")
        return tf.compat.v1.lookup.TextFileInitializer(filename, tf.string, -2, tf.int64,
                                                       -1), filename

    return string_models.tf1_lookup_model(path, initializer, assets=register_asset)


def test_a_tf1_initializer_is_accepted_for_its_registered_asset_and_refused_for_a_plain_path(
        models):
    vocabulary = models / "outside.txt"
    registered = _tf1_table_model(models / "tf1_asset", vocabulary, register_asset=True)
    assert (registered / "assets" / "outside.txt").is_file()
    assert _refused_ops(registered) == []
    plain = _tf1_table_model(models / "tf1_path", vocabulary, register_asset=False)
    assert _refused_ops(plain) == ["InitializeTableFromTextFileV2"]


def test_an_asset_resolves_only_to_a_regular_file_inside_assets(models):
    own = models / "own"
    assert resolve_asset(own, "vocabulary.txt") is None  # not the recorded name: no such file
    name = _proto(own).meta_graphs[0].asset_file_def[0].filename
    assert resolve_asset(own, name) == (own / "assets" / name).resolve()
    assert resolve_asset(own, "../saved_model.pb") is None  # in the model, not an asset
    assert resolve_asset(own, "") is None  # the directory itself
    assert resolve_asset(own, os.fspath(models / "outside.txt")) is None


def test_optimizing_a_model_whose_table_reads_outside_it_is_exit_5_and_writes_nothing(
        models, tmp_path, capsys):
    from tfopt.components.cli import main

    altered = _altered(models, "for_cli", SURGERIES["dot_dot_name"])
    dst = tmp_path / "dst"
    code = main(["optimize", str(altered), str(dst), "--transforms", "fold_constants"])
    err = capsys.readouterr().err
    assert code == DangerousOpError.exit_code == 5
    lines = error_lines(err)  # the stage lines aside
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "InitializeTableFromTextFileV2" in lines[0] and "reads files" in lines[0]
    assert not dst.exists()
    assert not [p for p in tmp_path.iterdir()]
