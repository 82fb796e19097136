"""bidirectional_outputs: a bidirectional LSTM's Y sliced per direction, squeezed and concatenated
on the last axis becomes Transpose + Reshape (and a batch-major Transpose after it is folded
in). Outputs compared exactly (tolerance 0): data movement only."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_graph_testing import assert_same_outputs, batch_feeds, const, float_input, model, ops

from tfopt.optimizer.candidates.onnx.rewrites.base import eliminate_dead_nodes
from tfopt.optimizer.candidates.onnx.rewrites.bidirectional_outputs import bidirectional_outputs

T, FEATURES, HIDDEN = 4, 3, 5


def split_and_joined(axis: int = 2, order=("forward", "backward"),
                     batch_major: bool = False) -> onnx.ModelProto:
    """x [T, batch, F] -> bidirectional LSTM -> Y's directions joined as tf2onnx writes it."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y"], hidden_size=HIDDEN,
                              direction="bidirectional"),
             helper.make_node("Slice", ["Y", "dir_0", "dir_1", "dir_1"], ["forward_4d"]),
             helper.make_node("Squeeze", ["forward_4d", "dir_1"], ["forward"]),
             helper.make_node("Slice", ["Y", "dir_1", "dir_2", "dir_1"], ["backward_4d"]),
             helper.make_node("Squeeze", ["backward_4d", "dir_1"], ["backward"]),
             helper.make_node("Concat", list(order), ["joined"], axis=axis)]
    if batch_major:
        nodes.append(helper.make_node("Transpose", ["joined"], ["y"], perm=[1, 0, 2]))
    return model(nodes, [float_input("x", [T, "batch", FEATURES])],
                 ["y" if batch_major else "joined"],
                 [const("W", rng.standard_normal((2, 4 * HIDDEN, FEATURES)).astype(np.float32)),
                  const("R", rng.standard_normal((2, 4 * HIDDEN, HIDDEN)).astype(np.float32)),
                  const("B", rng.standard_normal((2, 8 * HIDDEN)).astype(np.float32)),
                  *(const(f"dir_{i}", np.array([i], np.int64)) for i in range(3))])


@pytest.mark.parametrize("axis", [2, -1])
def test_the_directions_are_joined_by_one_transpose_and_a_reshape(axis):
    original = split_and_joined(axis=axis)
    rewritten = eliminate_dead_nodes(bidirectional_outputs(original))
    assert ops(rewritten) == {"LSTM": 1, "Transpose": 1, "Reshape": 1}
    assert_same_outputs(original, rewritten, batch_feeds("x", [T, None, FEATURES]))


def test_a_batch_major_transpose_after_it_is_folded_in():
    original = split_and_joined(batch_major=True)
    rewritten = eliminate_dead_nodes(bidirectional_outputs(original))
    assert ops(rewritten) == {"LSTM": 1, "Transpose": 1, "Reshape": 1}
    transpose = next(n for n in rewritten.graph.node if n.op_type == "Transpose")
    assert list(transpose.attribute[0].ints) == [2, 0, 1, 3]
    assert_same_outputs(original, rewritten, batch_feeds("x", [T, None, FEATURES]))


@pytest.mark.parametrize("near_miss", [{"axis": 0}, {"axis": 1},
                                       {"order": ("backward", "forward")}],
                         ids=["time axis", "batch axis", "backward first"])
def test_directions_joined_another_way_are_left_alone(near_miss):
    original = split_and_joined(**near_miss)
    assert bidirectional_outputs(original) is original
