"""Freeze a SavedModel and write it back: same signature, same outputs, servable as before."""

import numpy as np
import pytest

from tfopt.optimizer.inputs.generated import infer_int_ranges, make_inputs
from tfopt.optimizer.model.export import read_provenance, write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.savedmodel import list_signatures
from tfopt.optimizer.tf_runtime import import_tensorflow
from tfopt.optimizer.verify.equivalence import compare

tf = import_tensorflow()

ATOL = 1e-5  # freezing only turns variables into constants; oneDNN may reorder a few sums

CASES = [
    ("keras_cnn", "serving_default"),
    ("keras_lstm", "serving_default"),
    ("keras_token_attention", "serving_default"),
    ("tf_module_two_signatures", "serving_default"),
    ("tf_module_two_signatures", "calibrated"),
    ("tf1_saved_model", "serving_default"),
]


def _fixed_inputs(frozen, seed=3):
    feeds = make_inputs(frozen.signature, batch_size=4, seed=seed,
                        int_ranges=infer_int_ranges(frozen.graph_def, frozen.signature))
    if "temperature" in feeds:
        feeds["temperature"] = np.float32(1.7)
    return feeds


def _call(saved_model_dir, signature, feeds):
    fn = tf.saved_model.load(str(saved_model_dir)).signatures[signature]
    return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in feeds.items()}).items()}


@pytest.mark.parametrize("model,signature", CASES)
def test_frozen_savedmodel_keeps_signature_and_outputs(model_dir, tmp_path, model, signature):
    src = model_dir(model)
    frozen = freeze(src, signature)
    dst = write_saved_model(frozen, tmp_path / "frozen")

    source_sig = list_signatures(src)[signature]
    written = list_signatures(dst)
    assert list(written) == [signature]
    assert written[signature].same_contract(source_sig), (
        f"{written[signature].describe()} != {source_sig.describe()}")

    feeds = _fixed_inputs(frozen)
    expected, actual = _call(src, signature, feeds), _call(dst, signature, feeds)
    assert set(actual) == set(expected)
    for key in expected:
        np.testing.assert_allclose(actual[key], expected[key], atol=ATOL, rtol=0, err_msg=key)


@pytest.mark.parametrize("model", ["keras_cnn", "keras_lstm", "keras_token_attention"])
def test_frozen_graph_holds_no_variables(model_dir, model):
    ops = freeze(model_dir(model)).op_counts()
    assert not {"VarHandleOp", "ReadVariableOp", "VariableV2", "AssignVariableOp",
                "SaveV2", "RestoreV2"} & set(ops)


V1_LOOP_OPS = ("Enter", "Merge", "Switch", "NextIteration", "Exit", "LoopCond")


def test_a_frozen_lstm_keeps_functional_while_loops_and_computes_the_same(model_dir):
    src = model_dir("keras_lstm")
    frozen = freeze(src)
    ops = frozen.op_counts()
    assert ops["While"] == 2 and not set(V1_LOOP_OPS) & set(ops)
    library = {f.signature.name for f in frozen.graph_def.library.function}
    loops = [n for n in frozen.graph_def.node if n.op == "While"]
    for loop in loops:
        assert {loop.attr["cond"].func.name, loop.attr["body"].func.name} <= library
        # Lowered to a frame by the runtime that loads it, as tf.function marks its loops:
        # left false (the converter's setting) each trip is a function call, 3-4x slower.
        assert loop.attr["_lower_using_switch_merge"].b
    report = compare(src, frozen, batches=2, batch_size=4)
    assert report.max_abs_diff <= ATOL, report.summary()


def test_lowering_at_freezing_time_is_still_available(model_dir):
    src = model_dir("keras_lstm")
    lowered = freeze(src, lower_control_flow=True)
    ops = lowered.op_counts()
    # The recurrence is lowered to v1 dataflow control flow, still a loop, not unrolled.
    for op in V1_LOOP_OPS:
        assert ops[op] > 0, f"no {op} in the lowered LSTM graph"
    assert "While" not in ops and not lowered.graph_def.library.function
    assert compare(src, lowered, batches=1, batch_size=4).max_abs_diff <= ATOL


def test_embedding_inputs_get_ids_within_the_table(model_dir):
    frozen = freeze(model_dir("keras_token_attention"))
    ranges = infer_int_ranges(frozen.graph_def, frozen.signature)
    assert ranges == {"token_ids": (0, 100)}


def test_written_model_records_where_it_came_from(model_dir, tmp_path):
    src = model_dir("keras_cnn")
    dst = write_saved_model(freeze(src), tmp_path / "frozen", metadata={"note": "x"})
    provenance = read_provenance(dst)
    assert provenance["source"] == str(src)
    assert provenance["steps"] == ["freeze"]
    assert provenance["note"] == "x"


def test_written_model_loads_as_a_tf1_serving_model(model_dir, tmp_path):
    """TF Serving loads with the 'serve' tag through the C++ loader; so does TF1's Python API."""
    dst = write_saved_model(freeze(model_dir("keras_cnn")), tmp_path / "frozen")
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(dst))
        sig = meta.signature_def["serving_default"]
        x = np.zeros((2, 16, 16, 3), np.float32)
        out = session.run(sig.outputs["output_0"].name, {sig.inputs["image"].name: x})
    assert out.shape == (2, 5)
