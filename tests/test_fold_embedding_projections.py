"""fold_embedding_projections: ``GatherV2(table) -> Mean -> MatMul -> BiasAdd`` becomes
``GatherV2(table @ W + b) -> Mean``, and near misses are left alone.

Tolerance 1e-5 absolute on hand-built graphs (the projected rows are rounded once from float64;
the mean then sums n-wide rows instead of d-wide ones); the string models are compared against
their stock SavedModel with the optimize flow's own default tolerance (1e-4).
"""

import numpy as np
import pytest
import string_models
from graph_testing import assert_same_outputs, build_graph, context, op_counts, tf
from string_models import tokens

from tfopt.optimizer.optimize.flow import optimize
from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.runtime.tensorflow import frozen_runner
from tfopt.optimizer.transforms.registry import make_transform

RNG = np.random.default_rng(0)
TABLE = RNG.standard_normal((20, 8)).astype(np.float32)
FEEDS = {"ids": RNG.integers(0, 20, (3, 5)).astype(np.int32)}


def _bag(pool=tf.reduce_mean, columns=4, bias=True):
    """``ids [None, 5] -> gather(TABLE) -> pool over the tokens -> matmul(W [8, columns]) (+ b)`` as
    ``y``."""
    weight = RNG.standard_normal((8, columns)).astype(np.float32)
    offset = RNG.standard_normal(columns).astype(np.float32)

    def body():
        ids = tf.compat.v1.placeholder(tf.int32, [None, 5], name="ids")
        pooled = pool(tf.gather(tf.constant(TABLE), ids), axis=1)
        product = tf.linalg.matmul(pooled, tf.constant(weight))
        tf.identity(tf.nn.bias_add(product, offset) if bias else product, name="y")
    return build_graph(body)


def _fold(graph):
    return make_transform("fold_embedding_projections")(graph, context(["ids"], ["y"]))


@pytest.mark.parametrize("bias", [True, False])
def test_a_dense_layer_after_a_mean_pooled_embedding_folds_into_its_rows(bias):
    graph = _bag(bias=bias)
    folded = _fold(graph)

    assert op_counts(graph)["MatMul"] == 1
    assert op_counts(folded)["MatMul"] == op_counts(folded)["BiasAdd"] == 0
    assert op_counts(folded)["Mean"] == 1
    tables = [n for n in folded.node if n.op == "Const" and
              len(n.attr["value"].tensor.tensor_shape.dim) == 2]
    assert [[d.size for d in t.attr["value"].tensor.tensor_shape.dim] for t in tables] == [[20, 4]]
    assert_same_outputs(graph, folded, FEEDS, ["y:0"])


def _bag_over_features():
    """The mean over the features ([3, 5] left), then a product on those 5 columns."""
    weight = RNG.standard_normal((5, 3)).astype(np.float32)

    def body():
        ids = tf.compat.v1.placeholder(tf.int32, [None, 5], name="ids")
        pooled = tf.reduce_mean(tf.gather(tf.constant(TABLE), ids), axis=2)
        tf.identity(tf.linalg.matmul(pooled, tf.constant(weight)), name="y")
    return build_graph(body)


@pytest.mark.parametrize("near_miss", [
    lambda: _bag(pool=tf.reduce_sum),  # the bias would count once per token
    lambda: _bag(columns=12),  # the table would grow
    _bag_over_features,  # not a bag of rows
], ids=["sum_pooling", "wider_output", "features_pooled"])
def test_near_misses_are_left_alone(near_miss):
    graph = near_miss()
    folded = _fold(graph)
    assert op_counts(folded) == op_counts(graph)
    assert_same_outputs(graph, folded, FEEDS, ["y:0"], atol=0)


@pytest.mark.parametrize("name", ["string_lookup", "asset_vocabulary"])
def test_string_models_lose_their_dense_layer_and_agree_with_stock(name, tmp_path):
    build, length = {"string_lookup": (string_models.keras_string_lookup, 5),
                     "asset_vocabulary": (string_models.asset_vocabulary_lookup, 3)}[name]
    stock = tmp_path / "stock"
    build(stock)
    result = optimize(stock, INFERENCE_RECIPE)
    assert result.accepted
    optimized = op_counts(result.candidate.model.graph_def)
    assert optimized["MatMul"] == optimized["BiasAdd"] == 0
    assert op_counts(result.original.graph_def)["MatMul"] == 1
    feeds = {load_runner(stock).signature.inputs[0].key: tokens(6, length, seed=3)}
    want, got = load_runner(stock)(feeds), frozen_runner(result.candidate.model)(feeds)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, atol=1e-5, rtol=0)
