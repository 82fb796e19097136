"""constant_reshape_shapes: a Reshape whose target is computed from the batch size reads a
constant target instead, and the shape arithmetic goes.

Tolerance: none. A reshape moves no element, so outputs must be bit-identical (atol 0), at
several batch sizes: the constant's ``-1`` must stand for whatever batch comes.
"""

import numpy as np
import pytest
from graph_testing import (
    assert_idempotent,
    assert_same_outputs,
    build_graph,
    context,
    op_counts,
    tf,
)
from test_rewrite_gelu_erf import _encoder

from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.optimize.gtt_syntax import parse_transforms
from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE
from tfopt.optimizer.optimize.recipe_building import build_transforms
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

RNG = np.random.default_rng(0)
WEIGHTS = RNG.standard_normal((16, 12)).astype(np.float32)
SHAPE_OPS = ("Shape", "StridedSlice", "GatherV2", "Prod", "Pack", "ConcatV2")


def _rewrite(graph, outputs=("y",)):
    return make_transform("constant_reshape_shapes")(graph, context(["x"], outputs))


def _feeds(batch, length=8):
    return {"x": RNG.standard_normal((batch, length, 16)).astype(np.float32)}


def _assert_exact_at_several_batches(graph, rewritten, length=8):
    for batch in (1, 3, 5):
        assert_same_outputs(graph, rewritten, _feeds(batch, length), ["y"], atol=0.0)


def _tensordot_dense():
    """A Dense on ``[batch, 8, 16]`` as Keras writes it (``tf.tensordot``): the target
    ``[batch * 8, 16]`` from ``Shape -> GatherV2 -> Prod -> Pack``, and back to
    ``[batch, 8, 12]`` with ``ConcatV2``."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 16], name="x")
        tf.identity(tf.tensordot(x, tf.constant(WEIGHTS), axes=[[2], [0]]), name="y")
    return build_graph(body)


def test_a_tensordots_computed_targets_become_constants_and_its_shape_ops_go():
    graph = _tensordot_dense()
    rewritten = _rewrite(graph)

    before, after = op_counts(graph), op_counts(rewritten)
    assert sum(before[op] for op in SHAPE_OPS) >= 5
    # what is left is the Transpose's permutation, a ConcatV2 of constants (fold_constants'
    # work, not this transform's)
    assert [op for op in SHAPE_OPS if after[op]] == ["ConcatV2"] and after["ConcatV2"] == 1
    assert after["Reshape"] == before["Reshape"] == 2
    targets = sorted(_const_values(rewritten, n.input[1]) for n in rewritten.node
                     if n.op == "Reshape")
    assert targets == [[-1, 8, 12], [-1, 16]]
    _assert_exact_at_several_batches(graph, rewritten)
    assert_idempotent(make_transform("constant_reshape_shapes"), graph, context(["x"], ["y"]))


def test_a_target_built_from_shape_and_strided_slice_keeps_the_known_dims():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 16], name="x")
        leading = tf.shape(x)[:-1]
        tf.identity(tf.reshape(x * 2.0, tf.concat([leading, [4, 4]], 0)), name="y")
    graph = build_graph(body)
    rewritten = _rewrite(graph)

    reshape = next(n for n in rewritten.node if n.op == "Reshape")
    assert _const_values(rewritten, reshape.input[1]) == [-1, 8, 4, 4]
    assert not any(op_counts(rewritten)[op] for op in SHAPE_OPS)
    _assert_exact_at_several_batches(graph, rewritten)


def test_a_target_with_two_unknown_dims_is_left_alone():
    """Batch and length both unknown: ``[batch, length, 4, 4]`` has two entries no constant
    can hold; one -1 cannot stand for both."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, None, 16], name="x")
        tf.identity(tf.reshape(x, tf.concat([tf.shape(x)[:-1], [4, 4]], 0)), name="y")
    graph = build_graph(body)
    rewritten = _rewrite(graph)

    assert rewritten.SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)
    for length in (3, 8):
        assert_same_outputs(graph, rewritten, _feeds(2, length), ["y"], atol=0.0)


def test_a_target_computed_from_values_not_shapes_is_left_alone():
    """A target read from data (here the input's own entries) is not shape arithmetic: its
    value is not known before the call."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 16], name="x")
        n = tf.cast(tf.reduce_sum(x[:1, :1, :1]) * 0.0 + 8.0, tf.int32)
        tf.identity(tf.reshape(x, tf.stack([-1, n, 16])), name="y")
    graph = build_graph(body)

    rewritten = _rewrite(graph)
    assert op_counts(rewritten)["Pack"] == 1
    reshape = next(n for n in rewritten.node if n.op == "Reshape")
    assert next(n for n in rewritten.node if n.name == reshape.input[1]).op == "Pack"


def test_a_shape_read_elsewhere_too_is_kept_for_that_reader():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 16], name="x")
        shape = tf.shape(x)
        tf.identity(tf.reshape(x, tf.stack([shape[0] * 8, 16])), name="y")
        tf.identity(shape, name="shape_out")
    graph = build_graph(body)
    rewritten = make_transform("constant_reshape_shapes")(
        graph, context(["x"], ["y", "shape_out"]))

    assert op_counts(rewritten)["Shape"] == 1
    assert_same_outputs(graph, rewritten, _feeds(3), ["y", "shape_out"], atol=0.0)


@pytest.fixture(scope="module")
def encoder_frozen(tmp_path_factory):
    """A small Keras encoder (Dense layers on rank-3 inputs, attention) frozen and optimized by
    the recipe's transforms before this one."""
    path = _encoder(tmp_path_factory.mktemp("encoder"))
    before = parse_transforms(INFERENCE_RECIPE.replace(" constant_reshape_shapes", ""))
    model, _ = run_transforms(freeze(path), build_transforms(before))
    return model


def test_a_keras_encoders_reshapes_become_constant_and_its_outputs_stay_bit_identical(
        encoder_frozen):
    rewritten, _ = run_transforms(encoder_frozen, [make_transform("constant_reshape_shapes")])

    before, after = op_counts(encoder_frozen.graph_def), op_counts(rewritten.graph_def)
    assert sum(after[op] for op in SHAPE_OPS) < sum(before[op] for op in SHAPE_OPS)
    assert after["Shape"] == 0
    report = compare(encoder_frozen, rewritten)
    assert report.max_abs_diff == 0.0


def _const_values(graph_def, name):
    node = next(n for n in graph_def.node if n.name == name)
    assert node.op == "Const", f"{name} is a {node.op}"
    return tf.make_ndarray(node.attr["value"].tensor).tolist()
