"""flatten_dense_matmuls: Keras 3's rank-3 dense layers become rank-2 MatMul + BiasAdd, which
TensorFlow's remapper fuses.

Tolerances: hand-built graphs 1e-5 absolute (the same dot products through MatMul instead of
BatchMatMulV2, and the same float added to the same element); the Keras encoder 1e-4, as for
``rewrite_gelu_erf`` (its LayerNorms and softmaxes carry kernel rounding into the next layer).
"""

import numpy as np
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
from tfopt.optimizer.transforms.grappler import DEFAULT_OPTIMIZERS
from tfopt.optimizer.transforms.pipeline import context_for, run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

RNG = np.random.default_rng(0)
WEIGHTS = RNG.standard_normal((16, 12)).astype(np.float32)
FEEDS = {"x": RNG.standard_normal((2, 8, 16)).astype(np.float32)}


def _rewrite(graph, outputs=("y",)):
    return make_transform("flatten_dense_matmuls")(graph, context(["x"], outputs))


def _projection(tail):
    """``x [None, 8, 16] -> BatchMatMulV2(x, W [16, 12])`` as Keras's EinsumDense writes it,
    then ``tail(product)`` as the output ``y``."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 16], name="x")
        tf.identity(tail(tf.linalg.matmul(x, tf.constant(WEIGHTS))), name="y")
    return build_graph(body)


def _split_heads_plus(bias):
    """The query/key/value form: Reshape to [batch, 8, 3 heads, 4], then AddV2 of ``bias``."""
    return lambda p: tf.reshape(p, [-1, 8, 3, 4]) + tf.constant(bias)


def _fused_matmuls(graph_def, inputs=("x",), outputs=("y",)) -> int:
    """``_FusedMatMul`` nodes Grappler makes with the passes TensorFlow runs at load."""
    optimized = make_transform("grappler", optimizers=list(DEFAULT_OPTIMIZERS))(
        graph_def, context(inputs, outputs))
    return sum(n.op == "_FusedMatMul" for n in optimized.node)


def test_an_einsum_dense_with_split_heads_becomes_a_fused_matmul():
    graph = _projection(_split_heads_plus(RNG.standard_normal((3, 4)).astype(np.float32)))
    rewritten = _rewrite(graph)

    assert op_counts(graph)["BatchMatMulV2"] == 1 and op_counts(graph)["MatMul"] == 0
    after = op_counts(rewritten)
    assert after["BatchMatMulV2"] == 0 and after["MatMul"] == 1 and after["BiasAdd"] == 1
    assert after["AddV2"] == 0
    assert_same_outputs(graph, rewritten, FEEDS, ["y"], atol=1e-5)
    assert [_fused_matmuls(g) for g in (graph, rewritten)] == [0, 1]


def test_an_output_projection_with_bias_add_becomes_a_fused_matmul():
    bias = RNG.standard_normal(12).astype(np.float32)
    graph = _projection(lambda p: tf.nn.bias_add(p, tf.constant(bias)))
    rewritten = _rewrite(graph)

    after = op_counts(rewritten)
    assert after["BatchMatMulV2"] == 0 and after["MatMul"] == 1
    nodes = {n.name: n for n in rewritten.node}
    bias_add = next(n for n in rewritten.node if n.op == "BiasAdd")
    assert nodes[bias_add.input[0]].op == "MatMul"
    assert_same_outputs(graph, rewritten, FEEDS, ["y"], atol=1e-5)
    assert [_fused_matmuls(g) for g in (graph, rewritten)] == [0, 1]


def test_a_tensordot_dense_gets_its_bias_before_the_reshape():
    bias = RNG.standard_normal(12).astype(np.float32)

    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 16], name="x")
        product = tf.tensordot(x, tf.constant(WEIGHTS), [[2], [0]])
        tf.identity(tf.nn.bias_add(product, tf.constant(bias)), name="y")
    graph = build_graph(body)
    rewritten = _rewrite(graph)

    assert op_counts(rewritten)["Reshape"] == op_counts(graph)["Reshape"]
    assert_same_outputs(graph, rewritten, FEEDS, ["y"], atol=0)  # the same adds: exact
    assert [_fused_matmuls(g) for g in (graph, rewritten)] == [0, 1]


def test_a_bias_that_varies_along_the_rows_stays_after_the_reshape():
    graph = _projection(_split_heads_plus(RNG.standard_normal((8, 1, 1)).astype(np.float32)))
    rewritten = _rewrite(graph)

    after = op_counts(rewritten)
    assert after["MatMul"] == 1 and after["AddV2"] == 1 and after["BiasAdd"] == 0
    assert_same_outputs(graph, rewritten, FEEDS, ["y"], atol=1e-5)


def test_a_product_read_elsewhere_keeps_its_value_and_its_add():
    bias = RNG.standard_normal((3, 4)).astype(np.float32)

    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 16], name="x")
        product = tf.linalg.matmul(x, tf.constant(WEIGHTS), name="product")
        tf.identity(tf.reshape(product, [-1, 8, 3, 4]) + tf.constant(bias), name="y")
        tf.identity(product * 2.0, name="z")
    graph = build_graph(body)
    rewritten = _rewrite(graph, outputs=("y", "z"))

    after = op_counts(rewritten)
    assert after["BatchMatMulV2"] == 0 and after["AddV2"] == 1 and after["BiasAdd"] == 0
    assert_same_outputs(graph, rewritten, FEEDS, ["y", "z"], atol=1e-5)


def test_an_adjoint_or_variable_weight_product_is_left_alone():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 16], name="x")
        tf.identity(tf.linalg.matmul(x, tf.constant(WEIGHTS.T), adjoint_b=True), name="y")
        tf.identity(tf.linalg.matmul(x, tf.transpose(x, [0, 2, 1])), name="z")
    graph = build_graph(body)
    assert graph.SerializeToString(deterministic=True) == _rewrite(
        graph, outputs=("y", "z")).SerializeToString(deterministic=True)


def test_flatten_dense_matmuls_twice_changes_nothing():
    graph = _projection(_split_heads_plus(RNG.standard_normal((3, 4)).astype(np.float32)))
    assert_idempotent(make_transform("flatten_dense_matmuls"), graph, context(["x"], ["y"]))


def test_every_dense_layer_of_a_keras_encoder_fuses_with_its_bias(tmp_path):
    # folded first, as in the default recipe: the frozen projections' weights are Reshapes of
    # the variables' constants
    model, _ = run_transforms(freeze(_encoder(tmp_path / "encoder")),
                              [make_transform("fold_constants")])
    recipe = [make_transform("rewrite_gelu_erf"), make_transform("flatten_dense_matmuls")]
    rewritten, _ = run_transforms(model, recipe)

    before, after = op_counts(model.graph_def), op_counts(rewritten.graph_def)
    assert before["BatchMatMulV2"] == 8  # 4 projections per attention layer, 2 layers
    assert after["BatchMatMulV2"] == 0 and after["MatMul"] == before["MatMul"] + 8
    names = context_for(model)
    fused = _fused_matmuls(rewritten.graph_def, names.input_names, names.output_names)
    assert fused == after["MatMul"]  # every dense layer, attention's projections included
    report = compare(model, rewritten, batches=2, batch_size=4)
    assert report.within(atol=1e-4), report.summary()
