"""constant_reshape_shapes: a Reshape whose target is computed from the batch size gets a
constant target when symbolic shapes prove it (0 copies a size, -1 takes what is left).
Outputs compared exactly (tolerance 0): the same reshape."""

import numpy as np
import onnx
from onnx import helper
from onnx_graph_testing import assert_same_outputs, batch_feeds, const, float_input, model, ops

from tfopt.optimizer.candidates.onnx.rewrites.base import eliminate_dead_nodes
from tfopt.optimizer.candidates.onnx.rewrites.constant_reshape_shapes import constant_reshape_shapes

INITIALIZERS = [const("first", np.array([0], np.int64)), const("second", np.array([1], np.int64)),
                const("size_24", np.array([24], np.int64)), const("size_6", np.array([6], np.int64)),
                const("minus_one", np.array([-1], np.int64)),
                const("swapped", np.array([1, 0], np.int64)),
                const("leading_axes", np.array([0, 1], np.int64))]


def reshaped(target_nodes, x_shape=("batch", 4, 6)) -> onnx.ModelProto:
    """x -> Reshape(x, target computed from Shape(x) by ``target_nodes``) -> y."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), *target_nodes,
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    return model(nodes, [float_input("x", list(x_shape))], ["y"], INITIALIZERS)


def target(model_: onnx.ModelProto) -> list[int]:
    reshape = next(n for n in model_.graph.node if n.op_type == "Reshape")
    value = next(i for i in model_.graph.initializer if i.name == reshape.input[1])
    return onnx.numpy_helper.to_array(value).tolist()


def test_a_batch_kept_in_place_is_copied_with_zero():
    # [batch, 4, 6] -> Concat(shape[0:1], [24]) = [batch, 24]
    original = reshaped([
        helper.make_node("Slice", ["shape", "first", "second"], ["batch"]),
        helper.make_node("Concat", ["batch", "size_24"], ["target"], axis=0)])
    rewritten = eliminate_dead_nodes(constant_reshape_shapes(original))
    assert target(rewritten) == [0, 24]
    assert ops(rewritten) == {"Reshape": 1}
    assert_same_outputs(original, rewritten, batch_feeds("x", [None, 4, 6]))


def test_a_flattened_batch_becomes_minus_one():
    # [batch, 4, 6] -> Concat(prod(shape[0:2]), [6]) = [4 * batch, 6], as tf2onnx writes it
    original = reshaped([
        helper.make_node("Gather", ["shape", "leading_axes"], ["leading"]),
        helper.make_node("ReduceProd", ["leading"], ["product"], axes=[0], keepdims=0),
        helper.make_node("Unsqueeze", ["product", "first"], ["rows"]),
        helper.make_node("Concat", ["rows", "size_6"], ["target"], axis=0)])
    rewritten = eliminate_dead_nodes(constant_reshape_shapes(original))
    assert target(rewritten) == [-1, 6]
    assert ops(rewritten) == {"Reshape": 1}
    assert_same_outputs(original, rewritten, batch_feeds("x", [None, 4, 6]))


def test_a_target_with_two_symbolic_sizes_neither_in_place_is_left_alone():
    # [batch, steps] -> [steps, batch]: two unknown sizes, neither copied from its position
    original = reshaped([helper.make_node("Gather", ["shape", "swapped"], ["target"])],
                        x_shape=("batch", "steps"))
    assert constant_reshape_shapes(original) is original


def test_a_constant_target_is_left_alone():
    nodes = [helper.make_node("Reshape", ["x", "minus_one"], ["y"])]
    original = model(nodes, [float_input("x", ["batch", 4, 6])], ["y"], INITIALIZERS)
    assert constant_reshape_shapes(original) is original
