"""The model scan: a SavedModel holding file, network or Python ops is refused before TF loads it.

Hostile models are real SavedModels, written the way an attacker would: a ``tf.Module`` whose
serving function calls ``tf.io.read_file``, ``tf.py_function``, ``tf.print`` to a file... or a
TF1 model whose init op writes a file when TensorFlow loads it. The loader's own checkpoint
machinery is told apart by proto surgery on real models (a saver function called from a
signature, a restore op that also saves to a path of the model's choosing).
"""

import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_testing import assert_clean_failure, run_tfopt
from s3_server import moto_endpoint_fixture, s3_fixture  # noqa: F401

from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.pipeline.step_runner import run_step
from tfopt.optimizer.errors import DangerousOpError
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.op_scan import (
    CONDITIONAL_OPS,
    DEFAULT_POLICY,
    DENIED_OPS,
    ScanPolicy,
    ScanPolicyError,
    find_dangerous_ops,
)
from tfopt.optimizer.model.savedmodel import get_signature, read_saved_model_proto
from tfopt.optimizer.tf_runtime import import_tensorflow

tf = import_tensorflow()

ZOO = ["keras_cnn", "keras_lstm", "tf_module_two_signatures", "tf1_saved_model"]


class _Hostile(tf.Module):
    """A model with a variable (so it has a saver) whose serving function also runs ``body``."""

    def __init__(self, body):
        super().__init__()
        self.w = tf.Variable([[1.0, 2.0]])
        self.body = body

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def serve(self, x):
        return {"y": self.body(x * self.w)}


def _save(module, path) -> Path:
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return Path(path)


@tf.function
def _inner_reads(x):
    return x + tf.cast(tf.strings.length(tf.io.read_file("/etc/hostname")), tf.float32) * 0.0


@tf.function
def _outer(x):
    return _inner_reads(x) * 2.0


def _bodies(marker: str, print_target: str) -> dict:
    """Serving bodies, each calling one dangerous op; the op type the scan must name."""
    return {
        "read_file": ("ReadFile",
                      lambda x: x + tf.cast(tf.strings.length(tf.io.read_file(marker)),
                                            tf.float32)),
        "write_file": ("WriteFile", lambda x: _after(tf.io.write_file(marker, "pwned"), x)),
        "matching_files": ("MatchingFiles",
                           lambda x: x + tf.cast(tf.size(tf.io.matching_files("/etc/*")),
                                                 tf.float32)),
        "py_function": ("EagerPyFunc",
                        lambda x: tf.py_function(lambda t: t * 2.0, [x], tf.float32)),
        "numpy_function": ("PyFunc",
                           lambda x: tf.numpy_function(lambda t: t * 2.0, [x], tf.float32)),
        "print_to_file": ("PrintV2",
                          lambda x: _after(tf.print(x, output_stream=print_target), x)),
        "save_in_serving": ("SaveV2", lambda x: _after(
            tf.raw_ops.SaveV2(prefix=marker, tensor_names=["x"], shape_and_slices=[""],
                              tensors=[x]), x)),
        "nested_read": ("ReadFile", _outer),
    }


def _after(op, x):
    with tf.control_dependencies([op]):
        return tf.identity(x)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """``hostile(name)`` -> (SavedModel dir, op type) for each body in :func:`_bodies`."""
    root = tmp_path_factory.mktemp("hostile")
    marker = str(root / "marker")
    bodies = _bodies(marker, f"file://{root / 'printed.txt'}")
    built = {}

    def build(name):
        if name not in built:
            op, body = bodies[name]
            built[name] = (_save(_Hostile(body), root / name), op)
        return built[name]

    build.marker = Path(marker)
    return build


@pytest.fixture(scope="module")
def writes_on_load(tmp_path_factory):
    """A TF1 SavedModel whose main op writes a file as soon as TensorFlow loads it."""
    root = tmp_path_factory.mktemp("writes-on-load")
    marker = root / "PWNED"
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        w = tf.compat.v1.get_variable("w", initializer=tf.ones((3, 2)))
        y = tf.identity(tf.matmul(x, w), name="y")
        write = tf.io.write_file(str(marker), "pwned")
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            builder = tf.compat.v1.saved_model.Builder(str(root / "model"))
            builder.add_meta_graph_and_variables(
                session, ["serve"], main_op=write, signature_def_map={
                    "serving_default": tf.compat.v1.saved_model.predict_signature_def(
                        {"x": x}, {"y": y})})
            builder.save()
    return root / "model", marker


def _copy(src, dst) -> Path:
    shutil.copytree(src, dst)
    return Path(dst)


def _rewrite(path, change) -> None:
    """Edit ``saved_model.pb`` in place: ``change(meta_graph)`` on its only MetaGraph."""
    from tensorflow.core.protobuf import saved_model_pb2

    pb = Path(path) / "saved_model.pb"
    proto = saved_model_pb2.SavedModel.FromString(pb.read_bytes())
    change(proto.meta_graphs[0])
    pb.write_bytes(proto.SerializeToString())


def _refusal(path, policy=DEFAULT_POLICY) -> str:
    with pytest.raises(DangerousOpError) as caught:
        read_saved_model_proto(path, policy)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- no false positives ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ZOO)
def test_real_models_pass_the_scan_saver_and_all(name, model_dir):
    proto = read_saved_model_proto(model_dir(name))
    assert find_dangerous_ops(proto) == []
    ops = {n.op for mg in proto.meta_graphs for n in mg.graph_def.node} | {
        n.op for mg in proto.meta_graphs for f in mg.graph_def.library.function
        for n in f.node_def}
    assert {"SaveV2", "RestoreV2"} <= ops  # the loader's own checkpoint ops were there


def test_print_to_stderr_passes_where_print_to_a_file_does_not(tmp_path, hostile):
    to_stderr = _save(_Hostile(lambda x: _after(tf.print(x), x)), tmp_path / "stderr")
    assert find_dangerous_ops(read_saved_model_proto(to_stderr)) == []
    message = _refusal(hostile("print_to_file")[0])
    assert "PrintV2" in message and "output_stream 'file://" in message


# --- hostile models ----------------------------------------------------------------------------

SERVING_CASES = ["read_file", "write_file", "matching_files", "py_function", "numpy_function",
                 "print_to_file", "save_in_serving"]


@pytest.mark.parametrize("name", SERVING_CASES)
def test_a_dangerous_op_in_the_serving_function_is_refused_naming_op_node_and_function(
        name, hostile):
    path, op = hostile(name)
    message = _refusal(path)
    proto = read_saved_model_proto(path, ScanPolicy.create([op]))
    node, function = next((n.name, f.signature.name) for f in
                          proto.meta_graphs[0].graph_def.library.function
                          for n in f.node_def if n.op == op and "serve" in f.signature.name)
    assert f"op {op} at node '{node}' in function '{function}'" in message
    assert f"--allow-op {op}" in message and str(path) in message


def test_serving_save_is_refused_although_the_saver_holds_the_same_op(hostile):
    path, _ = hostile("save_in_serving")
    proto = read_saved_model_proto(path, ScanPolicy.create(["SaveV2"]))
    found = find_dangerous_ops(proto)
    assert [f.op for f in found] == ["SaveV2"]
    assert "traced_save" not in found[0].function


def test_an_op_in_a_nested_function_names_the_function_and_its_caller(hostile):
    path, _ = hostile("nested_read")
    message = _refusal(path)
    assert "in function '__inference__inner_reads_" in message
    assert "(called from '__inference__outer_" in message


def test_a_saver_function_called_from_a_signature_is_no_longer_the_loaders(tmp_path, model_dir):
    path = _copy(model_dir("tf_module_two_signatures"), tmp_path / "m")

    def serve_the_saver(meta_graph):
        nodes = {n.name: n for n in meta_graph.graph_def.node}
        save_node = meta_graph.saver_def.save_tensor_name.split(":")[0]
        serving = meta_graph.signature_def["serving_default"].outputs
        serving_node = nodes[next(iter(serving.values())).name.split(":")[0]]
        serving_node.attr["f"].func.name = nodes[save_node].attr["f"].func.name

    _rewrite(path, serve_the_saver)
    message = _refusal(path)
    assert "in function '__inference__traced_save_" in message


def test_a_restore_that_also_saves_to_a_path_of_its_own_is_refused(tmp_path, model_dir):
    path = _copy(model_dir("tf1_saved_model"), tmp_path / "m")

    def hijack_restore(meta_graph):
        graph = meta_graph.graph_def
        nodes = {n.name: n for n in graph.node}
        prefix = graph.node.add()
        prefix.CopyFrom(nodes["save/Const"])
        prefix.name = "evil/prefix"
        prefix.attr["value"].tensor.string_val[:] = [b"/tmp/somewhere-else"]
        evil = graph.node.add()
        evil.CopyFrom(next(n for n in graph.node if n.op == "SaveV2"))
        evil.name = "evil/SaveV2"
        evil.input[0] = "evil/prefix"
        restore = nodes[meta_graph.saver_def.restore_op_name]
        restore.input.append("^evil/SaveV2")

    _rewrite(path, hijack_restore)
    message = _refusal(path)
    assert "op SaveV2 at node 'evil/SaveV2' of the graph" in message
    assert "1 more" not in message  # the saver's own save/SaveV2 stays accepted


def test_a_node_whose_op_names_a_library_function_is_followed(tmp_path, model_dir):
    """TF calls a library function when a node's op is its name: no attribute to follow."""
    path = _copy(model_dir("tf_module_two_signatures"), tmp_path / "m")

    def call_by_op(meta_graph):
        library = meta_graph.graph_def.library
        reader = library.function.add()
        reader.signature.name = "innocent_looking"
        read = reader.node_def.add()
        read.name, read.op = "read", "ReadFile"
        caller = next(f for f in library.function if "predict" in f.signature.name
                      and "wrapper" not in f.signature.name)
        call = caller.node_def.add()
        call.name, call.op = "call", "innocent_looking"

    _rewrite(path, call_by_op)
    assert "in function 'innocent_looking' (called from '__inference_predict_" in _refusal(path)


@pytest.mark.parametrize("op, attr, value, refused", [
    ("PrintV2", "output_stream", b"log(warning)", False),
    ("PrintV2", "output_stream", b"file:///etc/cron.d/x", True),
    ("DecodeProtoV2", "descriptor_source", b"local://", False),
    ("DecodeProtoV2", "descriptor_source", b"bytes://\n\x03foo", False),
    ("DecodeProtoV2", "descriptor_source", b"/tmp/descriptors.bin", True),
    ("EncodeProto", "descriptor_source", b"/tmp/descriptors.bin", True),
])
def test_attribute_dependent_ops_are_refused_only_when_pointed_at_a_file(op, attr, value,
                                                                         refused):
    from tensorflow.core.framework import node_def_pb2

    node = node_def_pb2.NodeDef(name="n", op=op)
    node.attr[attr].s = value
    assert (ScanPolicy().refusal(node) is not None) is refused


def test_a_copy_with_debug_ops_is_refused_and_a_plain_copy_is_not():
    from tensorflow.core.framework import node_def_pb2

    plain = node_def_pb2.NodeDef(name="c", op="Copy")
    debug = node_def_pb2.NodeDef(name="d", op="Copy")
    debug.attr["debug_ops_spec"].list.s.append(b"DebugIdentity;file:///tmp/dump;0")
    assert ScanPolicy().refusal(plain) is None
    assert "debug" in ScanPolicy().refusal(debug)


def test_every_denied_op_is_a_real_op_of_this_tensorflow():
    """The list names ops TF really registers; only Rpc/TryRpc are older releases' ops."""
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    registry = op_def_pb2.OpList.FromString(
        pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
    registered = {op.name for op in registry.op}
    assert set(DENIED_OPS) - registered == {"Rpc", "TryRpc"}
    assert set(CONDITIONAL_OPS) <= registered
    assert len(DENIED_OPS) >= 90


# --- the policy: allow and extra deny ---------------------------------------------------------


def test_allowing_the_op_lets_a_trusted_model_through(hostile):
    path, op = hostile("read_file")
    trusting = ScanPolicy.create([op])
    assert find_dangerous_ops(read_saved_model_proto(path, trusting), trusting) == []
    assert get_signature(path, policy=trusting).input_keys == ["x"]
    _refusal(path)  # a read given no policy applies the default one: nothing lingers


def test_a_policy_given_to_optimize_reaches_the_scan_in_its_worker_process(hostile):
    """The policy is part of the worker's job, not of this process's state or environment.
    Asked for a signature the model lacks, the worker answers with the first check that fails
    when it reads the source: the scan without the policy, the signature with it (past the
    scan, before TensorFlow would load the model)."""
    from tfopt.optimizer.errors import UnknownSignatureError
    from tfopt.optimizer.optimize.flow import optimize

    path, op = hostile("read_file")
    with pytest.raises(DangerousOpError, match=f"op {op}"):
        optimize(path, "strip_unused_nodes", "no_such_signature", in_worker=True)
    with pytest.raises(UnknownSignatureError, match="no_such_signature"):
        optimize(path, "strip_unused_nodes", "no_such_signature", in_worker=True,
                 policy=ScanPolicy.create([op]))


def test_a_policy_crosses_to_json_speaking_workers_unchanged():
    """Runtime-tuning probes get the policy in their JSON arguments (records.py's form)."""
    import json

    from tfopt.optimizer.records import record_from_dict, record_to_dict

    policy = ScanPolicy.create(["ReadFile"], ["Conv2D"], max_pb_bytes=1234)
    assert record_from_dict(ScanPolicy, json.loads(json.dumps(record_to_dict(policy)))) == policy


def test_a_frozen_lstm_s_loop_bodies_are_scanned(model_dir, tmp_path):
    """freeze keeps an LSTM's loops as library functions: what tfopt writes is scanned there."""
    frozen_dir = write_saved_model(freeze(model_dir("keras_lstm")), tmp_path / "frozen")
    assert find_dangerous_ops(read_saved_model_proto(frozen_dir)) == []
    message = _refusal(frozen_dir, ScanPolicy.create(extra_denied_ops=["Sigmoid"]))
    assert "op Sigmoid" in message and "while_body" in message


def test_extra_denied_ops_refuse_what_the_built_in_list_accepts(model_dir):
    message = _refusal(model_dir("keras_cnn"), ScanPolicy.create(extra_denied_ops=["Conv2D"]))
    assert "op Conv2D" in message and "extra_denied_ops" in message


def test_allowing_an_op_the_scan_does_not_deny_is_a_typo_named_as_such():
    with pytest.raises(ScanPolicyError, match="did you mean 'ReadFile'"):
        ScanPolicy.create(["Readfile"])
    with pytest.raises(Exception, match="security.allow_ops.*did you mean 'WriteFile'"):
        config_from_mapping({"source": "x", "security": {"allow_ops": ["Writefile"]}})


# --- before TensorFlow loads anything ---------------------------------------------------------


def test_the_hostile_model_really_writes_when_tensorflow_loads_it(writes_on_load, tmp_path):
    """Control for the tests below: without the scan, loading alone writes the file."""
    model, marker = writes_on_load
    copy = _copy(model, tmp_path / "copy")
    assert not marker.exists()
    tf.saved_model.load(str(copy))
    assert marker.read_text() == "pwned"
    marker.unlink()


def test_freeze_refuses_a_model_that_writes_on_call_and_nothing_runs(hostile):
    from tfopt.optimizer.model.freeze import freeze

    path, _ = hostile("write_file")
    with pytest.raises(DangerousOpError, match="op WriteFile"):
        freeze(path)
    assert not hostile.marker.exists()
    from tfopt.optimizer.runtime import load_runner

    # control: allowed, it does write
    load_runner(path, policy=ScanPolicy.create(["WriteFile"]))({"x": np.ones((1, 2), np.float32)})
    assert hostile.marker.read_text() == "pwned"
    hostile.marker.unlink()


def test_cli_freeze_refuses_with_exit_5_before_tensorflow_loads_the_model(writes_on_load,
                                                                          tmp_path):
    model, marker = writes_on_load
    dst = tmp_path / "out"
    result = run_tfopt("freeze", model, dst)
    assert_clean_failure(result, 5, "refused before loading", "op WriteFile",
                         "--allow-op WriteFile")
    assert not marker.exists()
    assert not dst.exists() and not list(tmp_path.iterdir())


def test_cli_allow_op_with_a_typo_is_bad_input_naming_the_op_meant(model_dir):
    result = run_tfopt("inspect", model_dir("tf1_saved_model"), "--allow-op", "ReadFiles")
    assert_clean_failure(result, 2, "cannot allow op 'ReadFiles'", "did you mean 'ReadFile'")


# --- the pipeline: pull scans before anything else --------------------------------------------


def _pipeline_config(source, workdir, **security):
    return config_from_mapping({"source": str(source), "workdir": str(workdir),
                                "s3": {"region": "us-east-1"}, "security": security})


def test_pull_refuses_a_hostile_local_model_before_copying_it(writes_on_load, tmp_path):
    model, marker = writes_on_load
    workdir = tmp_path / "work"
    with pytest.raises(DangerousOpError, match=f"{model}: refused before loading"):
        run_step("pull", _pipeline_config(model, workdir))
    assert not marker.exists()
    assert not (workdir / "sources").exists() or not any((workdir / "sources").iterdir())


def test_the_pipeline_stops_at_pull_and_freeze_never_loads_the_model(writes_on_load, tmp_path):
    from tfopt.components.pipeline.run import run_pipeline

    model, marker = writes_on_load
    with pytest.raises(DangerousOpError):
        run_pipeline(_pipeline_config(model, tmp_path / "work"), publish_results=False)
    assert not marker.exists()
    assert not (tmp_path / "work" / "runs").exists()


def test_pull_from_s3_refuses_the_download_and_keeps_nothing(writes_on_load, s3, tmp_path):
    model, marker = writes_on_load
    s3.upload_directory(model, "models/hostile")
    uri = f"s3://{s3.bucket}/models/hostile"
    workdir = tmp_path / "work"
    config = config_from_mapping({"source": uri, "workdir": str(workdir),
                                  "s3": {"endpoint_url": s3.endpoint_url, "region": "us-east-1"}})
    with pytest.raises(DangerousOpError, match=f"{uri}: refused before loading"):
        run_step("pull", config)
    assert not marker.exists()
    assert not [p for p in (workdir / "sources").rglob("*") if p.is_file()]


def test_security_allow_ops_in_the_config_lets_the_pull_through(writes_on_load, tmp_path):
    model, marker = writes_on_load
    pulled = run_step("pull", _pipeline_config(model, tmp_path / "work",
                                               allow_ops=["WriteFile"]))
    assert (Path(pulled["path"]) / "saved_model.pb").is_file()
    assert not marker.exists()  # pulling scans and copies; it never loads
