"""rewrite_gelu_erf: Keras's Erfc GELU becomes the Erf pattern TensorFlow's remapper fuses.

Tolerances: hand-built graphs 1e-5 absolute on inputs up to |x| ~ 10 (``1 + erf(z)`` rounds where
``erfc(-z)`` does not: a few float32 ulps of x, ~1e-6 at |x| = 10; for large negative x both
are 0 and for large positive x both are x); the moved Reshape changes nothing, so the Tensordot
case is held to the same bound. The Keras encoder 1e-4: its LayerNorms and softmaxes carry the
rounding change of every GELU into the next layer.
"""

import math

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

from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.grappler import DEFAULT_OPTIMIZERS
from tfopt.optimizer.transforms.pipeline import context_for, run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

RNG = np.random.default_rng(0)
WEIGHTS = RNG.standard_normal((16, 32)).astype(np.float32)
BIAS = RNG.standard_normal(32).astype(np.float32)


def _rewrite(graph, inputs=("x",), outputs=("y",)):
    return make_transform("rewrite_gelu_erf")(graph, context(inputs, outputs))


def _erfc_gelu(x):
    """What Keras 3 and ``tf.nn.gelu(approximate=False)`` write: 0.5 * x * erfc(-x / sqrt 2)."""
    return tf.nn.gelu(x, approximate=False)


def _dense_gelu(rank: int, activation=_erfc_gelu):
    """MatMul + BiasAdd + GELU as a Dense layer exports it: on rank 2 directly, on rank 3
    through Tensordot (MatMul between two Reshapes)."""
    def body():
        if rank == 2:
            x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="x")
            product = tf.matmul(x, tf.constant(WEIGHTS))
        else:
            x = tf.compat.v1.placeholder(tf.float32, [1, 8, 16], name="x")
            product = tf.tensordot(x, tf.constant(WEIGHTS), [[2], [0]])
        tf.identity(activation(tf.nn.bias_add(product, tf.constant(BIAS))), name="y")
    return build_graph(body)


def _fused_gelu_matmuls(graph_def, inputs=("x",), outputs=("y",)) -> int:
    """How many ``_FusedMatMul(BiasAdd, GeluExact)`` Grappler makes of ``graph_def`` with the
    passes TensorFlow runs when it loads a graph (placed on the CPU, as at load time)."""
    optimized = make_transform("grappler", optimizers=list(DEFAULT_OPTIMIZERS))(
        graph_def, context(inputs, outputs))
    return sum(n.op == "_FusedMatMul" and list(n.attr["fused_ops"].list.s) ==
               [b"BiasAdd", b"GeluExact"] for n in optimized.node)


def _inputs(shape, scale=4.0):
    return {"x": (RNG.standard_normal(shape) * scale).astype(np.float32)}


@pytest.mark.parametrize("rank, shape", [(2, (5, 16)), (3, (1, 8, 16))])
def test_rewrite_gelu_erf_writes_the_pattern_the_remapper_fuses(rank, shape):
    graph = _dense_gelu(rank)
    rewritten = _rewrite(graph)

    before, after = op_counts(graph), op_counts(rewritten)
    assert before["Erfc"] == 1 and before["Neg"] == 1
    assert after["Erfc"] == 0 and after["Neg"] == 0 and after["Erf"] == 1
    assert after["AddV2"] == 1 and after["Reshape"] == before["Reshape"]
    assert_same_outputs(graph, rewritten, _inputs(shape), ["y"], atol=1e-5)
    assert _fused_gelu_matmuls(graph) == 0
    assert _fused_gelu_matmuls(rewritten) == 1


def test_rewrite_gelu_erf_moves_the_tensordot_reshape_after_the_gelu():
    rewritten = _rewrite(_dense_gelu(3))

    nodes = {n.name: n for n in rewritten.node}
    bias_add = next(n for n in rewritten.node if n.op == "BiasAdd")
    assert nodes[bias_add.input[0]].op == "MatMul"
    gelu_output = nodes[nodes["y"].input[0]]
    # the output keeps its name and shape: it is now the Reshape, reading the GELU
    assert gelu_output.op == "Reshape" and nodes[gelu_output.input[0]].op == "Mul"


def test_rewrite_gelu_erf_agrees_with_erfc_far_into_the_tails():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        tf.identity(_erfc_gelu(x), name="y")
    graph = build_graph(body)
    tails = np.concatenate([np.linspace(-12, 12, 2001), [-1e4, -40, 40, 1e4]]).astype(np.float32)
    assert_same_outputs(graph, _rewrite(graph), {"x": tails}, ["y"], atol=1e-5, rtol=1e-6)


def test_rewrite_gelu_erf_leaves_a_chain_with_another_constant():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="x")
        y = tf.nn.bias_add(tf.matmul(x, tf.constant(WEIGHTS)), tf.constant(BIAS))
        # 0.5 * x * erfc(-0.8 x): GELU's shape, another function
        tf.identity(0.5 * y * tf.math.erfc(-y * np.float32(0.8)), name="y")
    graph = build_graph(body)
    assert graph.SerializeToString(deterministic=True) == \
        _rewrite(graph).SerializeToString(deterministic=True)


def test_rewrite_gelu_erf_leaves_an_intermediate_read_elsewhere():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="x")
        y = tf.nn.bias_add(tf.matmul(x, tf.constant(WEIGHTS)), tf.constant(BIAS))
        scaled = tf.multiply(tf.negative(y), np.float32(1 / math.sqrt(2)), name="scaled")
        tf.identity(tf.multiply(0.5 * y, tf.math.erfc(scaled)), name="y")
        tf.identity(scaled, name="z")
    graph = build_graph(body)
    assert graph.SerializeToString(deterministic=True) == _rewrite(
        graph, outputs=("y", "z")).SerializeToString(deterministic=True)


def test_rewrite_gelu_erf_leaves_approximate_gelu():
    graph = _dense_gelu(2, lambda x: tf.nn.gelu(x, approximate=True))
    assert graph.SerializeToString(deterministic=True) == \
        _rewrite(graph).SerializeToString(deterministic=True)


def test_rewrite_gelu_erf_twice_changes_nothing():
    assert_idempotent(make_transform("rewrite_gelu_erf"), _dense_gelu(3), context(["x"], ["y"]))


def _encoder(path, length=8, vocabulary=50, hidden=16, layers=2):
    """The BERT-style encoder of benchmarks/families.py, small, and with non-zero biases as a
    trained one has: Grappler drops a BiasAdd of zeros before the remapper could fuse it."""
    import keras

    keras.utils.set_random_seed(0)
    biases = keras.initializers.RandomNormal(0, 0.5)
    ids = keras.Input((length,), dtype="int32", name="token_ids")
    x = keras.layers.Embedding(vocabulary, hidden)(ids)
    for _ in range(layers):
        attended = keras.layers.MultiHeadAttention(2, hidden // 2, bias_initializer=biases)(x, x)
        x = keras.layers.LayerNormalization(epsilon=1e-12)(x + attended)
        ffn = keras.layers.Dense(4 * hidden, activation="gelu", bias_initializer=biases)(x)
        x = keras.layers.LayerNormalization(epsilon=1e-12)(
            x + keras.layers.Dense(hidden, bias_initializer=biases)(ffn))
    pooled = keras.layers.Dense(hidden, activation="tanh", bias_initializer=biases)(x[:, 0, :])
    logits = keras.layers.Dense(10, bias_initializer=biases)(pooled)
    keras.Model(ids, logits).export(str(path), verbose=False)
    return path


def test_rewrite_gelu_erf_lets_every_ffn_gelu_of_a_keras_encoder_fuse(tmp_path):
    model = freeze(_encoder(tmp_path / "encoder"))
    rewritten, _ = run_transforms(model, [make_transform("rewrite_gelu_erf")])

    assert op_counts(model.graph_def)["Erfc"] == 2
    assert op_counts(rewritten.graph_def)["Erfc"] == 0
    assert op_counts(rewritten.graph_def)["Erf"] == 2
    names = context_for(model)
    fused = [_fused_gelu_matmuls(m.graph_def, names.input_names, names.output_names)
             for m in (model, rewritten)]
    assert fused == [0, 2]
    report = compare(model, rewritten, batches=2, batch_size=4)
    assert report.within(atol=1e-4), report.summary()
