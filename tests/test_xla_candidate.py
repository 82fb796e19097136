"""The XLA candidate: same signature, same outputs, marked must-compile, and really compiled by
XLA when loaded the TF2 way and when run in a TF1 Session (TF Serving's path).

Tolerance 1e-5 against the frozen graph: XLA fuses and reorders float32 arithmetic but computes
in float32 (measured max |diff| 3e-8 on keras_cnn's softmax, 6e-8 on keras_lstm's outputs).
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from graph_testing import build_graph, tf

from tfopt.optimizer.candidates.xla import (
    XlaRefused,
    must_compile_functions,
    write_xla_saved_model,
    xla_compiled,
    xla_partition,
)
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.model.export import read_provenance
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.savedmodel import (
    get_signature,
    read_saved_model_proto,
    serving_meta_graph,
)
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.verify.equivalence import compare


@pytest.fixture(scope="module")
def cnn_xla(model_dir, tmp_path_factory):
    frozen = freeze(model_dir("keras_cnn"))
    return frozen, write_xla_saved_model(frozen, tmp_path_factory.mktemp("xla") / "cnn_xla")


def test_the_saved_model_keeps_the_signature_and_marks_its_function_must_compile(
        cnn_xla, model_dir):
    _, saved = cnn_xla
    assert get_signature(saved).same_contract(get_signature(model_dir("keras_cnn")))
    graph_def = serving_meta_graph(read_saved_model_proto(saved), saved).graph_def
    assert len(must_compile_functions(graph_def)) == 1
    call_ops = [n.op for n in graph_def.node if n.op not in ("Placeholder", "Identity")]
    assert call_ops == ["PartitionedCall"], "the whole graph should be one compiled call"
    assert read_provenance(saved)["tensorflow_model_server_flags"] == [
        "--xla_cpu_compilation_enabled=true"]


def test_outputs_match_the_frozen_graph_at_batch_1_and_8(cnn_xla):
    frozen, saved = cnn_xla
    served = tf.saved_model.load(str(saved)).signatures["serving_default"]
    reference = load_runner(frozen)
    for batch in (1, 8):
        feeds = make_inputs(frozen.signature, batch, seed=batch)
        out = served(image=tf.constant(feeds["image"]))["output_0"].numpy()
        assert out.shape == (batch, 5)
        np.testing.assert_allclose(out, reference(feeds)["output_0"], atol=1e-5, rtol=0)


XLA_DUMP_CHECK = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from tfopt.optimizer.tf_runtime import import_tensorflow
    tf = import_tensorflow()
    path, dump = sys.argv[1], sys.argv[2]
    def modules():
        return len([f for f in os.listdir(dump) if f.endswith("before_optimizations.txt")]) \\
            if os.path.isdir(dump) else 0
    counts = {"start": modules()}
    served = tf.saved_model.load(path).signatures["serving_default"]
    for batch in (1, 8):
        served(image=tf.zeros([batch, 16, 16, 3]))
    counts["saved_model_load"] = modules()
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        sig = meta.signature_def["serving_default"]
        out = session.run(sig.outputs["output_0"].name,
                          {sig.inputs["image"].name: np.zeros([4, 16, 16, 3], np.float32)})
    counts["session"] = modules()
    counts["session_shape"] = list(out.shape)
    print(json.dumps(counts))
""")


def _run_with_xla_dump(script: str, saved, dump) -> str:
    """The last line ``script`` prints, run on ``saved`` in a process dumping XLA's modules."""
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump}", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", script, str(saved), str(dump)],
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


def test_xla_compiles_it_when_loaded_and_when_run_in_a_session(cnn_xla, tmp_path):
    """Counted from XLA's own dump: one HLO module per compilation. tf.saved_model.load then
    batches 1 and 8 compile two; a Session (how TF Serving runs SavedModels) compiles again."""
    _, saved = cnn_xla
    counts = json.loads(_run_with_xla_dump(XLA_DUMP_CHECK, saved, tmp_path / "dump"))
    assert counts["start"] == 0
    assert counts["saved_model_load"] == 2
    assert counts["session"] > counts["saved_model_load"] and counts["session_shape"] == [4, 5]


def _string_model() -> FrozenModel:
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.strings.to_number(tf.strings.as_string(x), name="y")
    return FrozenModel(build_graph(body), SignatureInfo(
        "serving_default", (TensorSpecInfo("x", "x:0", "float32", (None, 3)),),
        (TensorSpecInfo("y", "y:0", "float32", (None, 3)),)))


def test_a_model_with_an_op_xla_cannot_compile_is_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(XlaRefused, match="XLA cannot compile.*AsString") as refused:
        write_xla_saved_model(_string_model(), tmp_path / "out")
    assert refused.value.exit_code == 2
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == []


def _hashed_tokens_model() -> FrozenModel:
    """string tokens -> hash buckets (no XLA kernel) -> embedding rows -> mean -> dense."""
    rng = np.random.default_rng(0)

    def body():
        tokens = tf.compat.v1.placeholder(tf.string, [None, 4], name="tokens")
        ids = tf.strings.to_hash_bucket_fast(tokens, 50, name="ids")
        rows = tf.gather(tf.constant(rng.standard_normal((50, 8)).astype(np.float32)), ids)
        pooled = tf.reduce_mean(rows, axis=1)
        weights = tf.constant(rng.standard_normal((8, 3)).astype(np.float32))
        tf.nn.relu(tf.matmul(pooled, weights) + 0.5, name="scores")
    return FrozenModel(build_graph(body), SignatureInfo(
        "serving_default", (TensorSpecInfo("tokens", "tokens:0", "string", (None, 4)),),
        (TensorSpecInfo("scores", "scores:0", "float32", (None, 3)),)))


def test_the_ops_xla_refuses_stay_outside_and_the_numeric_rest_is_compiled(tmp_path):
    model = _hashed_tokens_model()
    partition = xla_partition(model)
    ops = {n.name: n.op for n in model.graph_def.node}
    assert partition.refused == ("StringToHashBucketFast",)
    assert {ops[n] for n in partition.outside} == {"Placeholder", "StringToHashBucketFast"}
    assert {"GatherV2", "Mean", "MatMul", "Relu"} <= {ops[n] for n in partition.inside}
    saved = write_xla_saved_model(model, tmp_path / "xla")
    graph_def = serving_meta_graph(read_saved_model_proto(saved), saved).graph_def
    [compiled] = must_compile_functions(graph_def)
    body = next(f for f in graph_def.library.function if f.signature.name == compiled)
    assert {"MatMul", "Relu"} <= {n.op for n in body.node_def}
    assert "StringToHashBucketFast" not in {n.op for n in body.node_def}
    assert "StringToHashBucketFast" in {n.op for n in graph_def.node}
    feeds = {"tokens": np.array([["a", "b", "", "日本"], ["x", "a", "a", "zz"]], dtype=object)}
    want, got = load_runner(model)(feeds), load_runner(saved)(feeds)
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-5, rtol=0)


def test_lowered_while_loops_are_refused(model_dir):
    with pytest.raises(XlaRefused, match="v1 while-loop frames.*lower_control_flow"):
        xla_compiled(freeze(model_dir("keras_lstm"), lower_control_flow=True))


@pytest.mark.parametrize("model", ["keras_lstm", "keras_gru"])
def test_recurrent_models_compile_and_agree_with_the_original(model_dir, tmp_path, model):
    src = model_dir(model)
    saved = write_xla_saved_model(freeze(src), tmp_path / "xla")
    graph_def = serving_meta_graph(read_saved_model_proto(saved), saved).graph_def
    assert len(must_compile_functions(graph_def)) == 1
    report = compare(src, saved, batches=2, batch_size=4)
    assert report.max_abs_diff < 1e-5, report.summary()


LOOP_DUMP_CHECK = textwrap.dedent("""
    import os, sys
    from tfopt.optimizer.tf_runtime import import_tensorflow
    tf = import_tensorflow()
    path, dump = sys.argv[1], sys.argv[2]
    tf.saved_model.load(path).signatures["serving_default"](sequence=tf.zeros([1, 12, 6]))
    hlo = [f for f in os.listdir(dump) if f.endswith("before_optimizations.txt")]
    print(len(hlo), sum(open(os.path.join(dump, f)).read().count(" while(") for f in hlo))
""")


def test_xla_compiles_an_lstm_s_loops_as_hlo_while_loops(model_dir, tmp_path):
    """The runtime lowers a functional While to a frame at load; inside the must-compile
    function XLA must get it first, as one HLO while per LSTM layer."""
    saved = write_xla_saved_model(freeze(model_dir("keras_lstm")), tmp_path / "xla")
    modules, loops = map(int, _run_with_xla_dump(LOOP_DUMP_CHECK, saved, tmp_path / "dump")
                         .split())
    assert (modules, loops) == (1, 2)
