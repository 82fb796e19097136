"""tensordot_matmul: tf2onnx's Tensordot (Reshape to [rows, K] -> MatMul(W[K, N]) -> Reshape back)
becomes one N-D MatMul when symbolic shapes prove the pattern. Outputs compared exactly
(tolerance 0): ONNX Runtime runs both as the same matrix product."""

import numpy as np
import onnx
from onnx import helper
from onnx_graph_testing import assert_same_outputs, batch_feeds, const, float_input, model, ops

from tfopt.optimizer.candidates.onnx.rewrites.base import eliminate_dead_nodes
from tfopt.optimizer.candidates.onnx.rewrites.tensordot_matmul import tensordot_matmul

STEPS, K, N = 5, 8, 3


def tensordot(unflattened: str = "leading", extra_outputs=()) -> onnx.ModelProto:
    """x [batch, STEPS, K] -> Dense(N) per step, as tf2onnx converts tf.tensordot."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "leading_axes"], ["leading"]),
             helper.make_node("ReduceProd", ["leading"], ["product"], axes=[0], keepdims=0),
             helper.make_node("Unsqueeze", ["product", "first"], ["rows"]),
             helper.make_node("Concat", ["rows", "k"], ["flat_shape"], axis=0),
             helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "W"], ["product_rows"]),
             helper.make_node("Concat", [unflattened, "n"], ["out_shape"], axis=0),
             helper.make_node("Reshape", ["product_rows", "out_shape"], ["y"])]
    weight = np.random.default_rng(5).standard_normal((K, N)).astype(np.float32)
    return model(nodes, [float_input("x", ["batch", STEPS, K])], ["y", *extra_outputs],
                 [const("W", weight), const("first", np.array([0], np.int64)),
                  const("leading_axes", np.array([0, 1], np.int64)),
                  const("k", np.array([K], np.int64)), const("n", np.array([N], np.int64))])


def test_the_reshapes_and_their_shape_computation_go_leaving_one_matmul():
    original = tensordot()
    rewritten = eliminate_dead_nodes(tensordot_matmul(original))
    assert ops(rewritten) == {"MatMul": 1}
    assert list(rewritten.graph.node[0].input) == ["x", "W"]
    assert_same_outputs(original, rewritten, batch_feeds("x", [None, STEPS, K]))


def test_a_tensordot_reshaped_to_another_shape_is_left_alone():
    # the rows stay flattened, [batch * STEPS, N]: not x.shape[:-1] + [N]
    original = tensordot(unflattened="rows")
    assert tensordot_matmul(original) is original


def test_a_flattened_input_read_elsewhere_is_left_alone():
    original = tensordot(extra_outputs=["flat"])
    assert tensordot_matmul(original) is original
