"""The ONNX simplification stage: the rewrites applied in turn until nothing changes, the input
never modified, a failing rewrite skipped; and on a real Keras bidirectional LSTM tagger, the
``optimized`` candidate built from the simplified graph.

Tolerances: the hand-built graphs are compared exactly (the rewrites move data, never change
arithmetic); the tagger against its SavedModel within the ONNX float flavours' FLOAT_ATOL."""

import json
import logging

import numpy as np
import onnx
import pytest
from converter_testing import FLOAT_ATOL
from onnx import helper
from onnx_graph_testing import assert_same_outputs, batch_feeds, ops
from test_onnx_rewrite_bidirectional_outputs import split_and_joined
from test_onnx_rewrite_drop_zero_initial_states import bidirectional_lstm_with_keras_zero_states

from tfopt.optimizer.candidates.onnx.rewrites.base import Rewrite
from tfopt.optimizer.candidates.onnx.rewrites.registry import REWRITES
from tfopt.optimizer.candidates.onnx.rewrites.simplify import simplify


def lstm_with_zero_states_and_split_outputs() -> onnx.ModelProto:
    """Two patterns in one graph: Keras's zero states, and Y's directions split and joined."""
    joined = split_and_joined()
    states = bidirectional_lstm_with_keras_zero_states()
    lstm = next(n for n in states.graph.node if n.op_type == "LSTM")
    del lstm.output[1:]
    nodes = [n for n in states.graph.node if n.op_type != "LSTM"] + [lstm] + [
        n for n in joined.graph.node if n.op_type != "LSTM"]
    graph = helper.make_graph(nodes, "test", list(states.graph.input), list(joined.graph.output),
                              list(states.graph.initializer) + [
                                  i for i in joined.graph.initializer
                                  if i.name.startswith("dir_")])
    model = helper.make_model(graph, opset_imports=list(states.opset_import))
    model.ir_version = states.ir_version
    return model


def test_every_rewrite_that_matches_fires_and_the_input_is_not_modified():
    original = lstm_with_zero_states_and_split_outputs()
    before = original.SerializeToString()
    done = simplify(original)
    assert original.SerializeToString() == before
    assert done.fired == ("drop_zero_initial_states", "bidirectional_outputs")
    assert ops(done.model) == {"LSTM": 1, "Transpose": 1, "Reshape": 1}
    assert (done.nodes_before, done.nodes_after) == (len(original.graph.node), 3)
    assert_same_outputs(original, done.model, batch_feeds("x", [4, None, 3]))


def test_a_graph_with_nothing_to_rewrite_comes_back_as_it_was():
    original = split_and_joined(axis=0)
    done = simplify(original)
    assert done.model is original and done.fired == ()


def test_a_rewrite_that_raises_is_logged_and_skipped_keeping_the_graph(caplog):
    def broken(model):
        raise RuntimeError("a bug in a rewrite")

    original = lstm_with_zero_states_and_split_outputs()
    with caplog.at_level(logging.WARNING):
        done = simplify(original, [Rewrite("broken", broken), *REWRITES])
    assert "ONNX rewrite broken failed" in caplog.text
    assert done.fired == ("drop_zero_initial_states", "bidirectional_outputs")


def test_a_rewrite_that_leaves_a_dangling_input_is_refused(caplog):
    def dangling(model):
        result = onnx.ModelProto()
        result.CopyFrom(model)
        result.graph.node[-1].input[0] = "nothing_writes_this"
        return result

    original = split_and_joined()
    with caplog.at_level(logging.WARNING):
        done = simplify(original, [Rewrite("dangling", dangling)])
    assert done.model is original and done.fired == ()
    assert "nothing before it writes" in caplog.text


@pytest.fixture(scope="module")
def tagger_candidates(model_dir, tmp_path_factory):
    from tfopt.optimizer.candidates.onnx.convert import OnnxExport, convert_to_onnx

    source = model_dir("keras_bilstm_tagger")
    export = OnnxExport(source)
    root = tmp_path_factory.mktemp("tagger")
    return source, {flavour: convert_to_onnx(source, root / flavour / "model.onnx", flavour,
                                             export=export)
                    for flavour in ("fp32", "optimized", "dynamic_int8")}


def test_the_tagger_optimized_has_fewer_nodes_and_the_savedmodels_outputs(tagger_candidates):
    from tfopt.optimizer.runtime import load_runner

    source, models = tagger_candidates
    nodes = {flavour: len(onnx.load(str(m.path)).graph.node) for flavour, m in models.items()}
    assert nodes["optimized"] < nodes["fp32"], nodes
    reference = load_runner(source)
    runner = load_runner(models["optimized"].path)
    assert runner.signature.same_contract(reference.signature)
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        # negative ids too: Keras counts them from the end of the table, as Gather does
        feeds = {"token_ids": rng.integers(-50, 50, (batch, 10)).astype(np.int32)}
        np.testing.assert_allclose(runner(feeds)["output_0"], reference(feeds)["output_0"],
                                   atol=FLOAT_ATOL, err_msg=f"batch {batch}")


def test_the_tagger_sidecar_says_the_graph_was_simplified_and_by_what(tagger_candidates):
    _, models = tagger_candidates
    sidecar = json.loads(models["optimized"].sidecar_path.read_text())
    assert "simplified" in sidecar["flavour_description"]
    record = sidecar["converter"]["graph_simplification"]
    assert record["rewrites"] == ["drop_zero_initial_states", "gather_negative_ids",
                                  "tensordot_matmul", "bidirectional_outputs"]
    assert record["nodes_after"] < record["nodes_before"]
    assert "graph_simplification" not in json.loads(
        models["fp32"].sidecar_path.read_text())["converter"]
    # the int8 flavours quantize the simplified graph: the select and the zero states are gone
    int8 = onnx.load(str(models["dynamic_int8"].path))
    assert json.loads(models["dynamic_int8"].sidecar_path.read_text())["converter"][
        "graph_simplification"] == record
    assert not {"Not", "Less", "Expand"} & {n.op_type for n in int8.graph.node}
