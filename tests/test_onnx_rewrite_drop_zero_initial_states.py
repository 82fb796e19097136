"""drop_zero_initial_states: a recurrent op's initial states proven zero are omitted (the op's
default). Outputs compared exactly (tolerance 0): the default is zeros."""

import numpy as np
from onnx import helper
from onnx_graph_testing import (
    assert_same_outputs,
    batch_feeds,
    const,
    float_input,
    model,
    ops,
    zeros_initializers,
    zeros_like_batch,
)

from tfopt.optimizer.candidates.onnx.rewrites.base import eliminate_dead_nodes
from tfopt.optimizer.candidates.onnx.rewrites.drop_zero_initial_states import (
    drop_zero_initial_states,
)

T, FEATURES, HIDDEN = 4, 3, 5


def weights(gates: int, directions: int):
    rng = np.random.default_rng(7)
    return [const("W", rng.standard_normal((directions, gates * HIDDEN, FEATURES),
                                           ).astype(np.float32)),
            const("R", rng.standard_normal((directions, gates * HIDDEN, HIDDEN),
                                           ).astype(np.float32)),
            const("B", rng.standard_normal((directions, 2 * gates * HIDDEN),
                                           ).astype(np.float32))]


def bidirectional_lstm_with_keras_zero_states(zero: float = 0.0):
    """As tf2onnx writes a Keras Bidirectional(LSTM): zeros([batch, units]) per direction."""
    nodes = [*zeros_like_batch("x", 1, HIDDEN, "zeros"),
             helper.make_node("Unsqueeze", ["zeros", "start_0"], ["state"]),
             helper.make_node("Concat", ["state", "state"], ["states"], axis=0),
             helper.make_node("LSTM", ["x", "W", "R", "B", "", "states", "states"],
                              ["Y", "Y_h", "Y_c"], hidden_size=HIDDEN,
                              direction="bidirectional")]
    return model(nodes, [float_input("x", [T, "batch", FEATURES])], ["Y", "Y_h", "Y_c"],
                 [*zeros_initializers(HIDDEN, zero=zero), *weights(4, 2)])


def test_an_lstms_zero_states_are_omitted_and_their_shape_computation_goes():
    original = bidirectional_lstm_with_keras_zero_states()
    rewritten = drop_zero_initial_states(original)
    lstm = next(n for n in rewritten.graph.node if n.op_type == "LSTM")
    assert list(lstm.input) == ["x", "W", "R", "B"]
    assert ops(eliminate_dead_nodes(rewritten)) == {"LSTM": 1}
    assert_same_outputs(original, rewritten, batch_feeds("x", [T, None, FEATURES]))


def test_a_grus_state_from_constant_of_shape_zero_is_omitted():
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Slice", ["shape", "start_1", "start_2"], ["batch"]),
             helper.make_node("Concat", ["start_1", "batch", f"size_{HIDDEN}"], ["dims"],
                              axis=0),
             helper.make_node("ConstantOfShape", ["dims"], ["state"]),
             helper.make_node("GRU", ["x", "W", "R", "B", "", "state"], ["Y", "Y_h"],
                              hidden_size=HIDDEN)]
    original = model(nodes, [float_input("x", [T, "batch", FEATURES])], ["Y", "Y_h"],
                     [*zeros_initializers(HIDDEN), *weights(3, 1)])
    rewritten = drop_zero_initial_states(original)
    assert [list(n.input) for n in rewritten.graph.node if n.op_type == "GRU"] == [
        ["x", "W", "R", "B"]]
    assert_same_outputs(original, rewritten, batch_feeds("x", [T, None, FEATURES]))


def test_a_non_zero_initial_state_is_left_alone():
    original = bidirectional_lstm_with_keras_zero_states(zero=0.5)
    assert drop_zero_initial_states(original) is original
