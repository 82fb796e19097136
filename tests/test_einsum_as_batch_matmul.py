"""einsum_as_batch_matmul: a two-operand Einsum that is a batched matrix product up to transposes
becomes Transposes + BatchMatMulV2, which oneDNN runs faster than its Einsum.

Tolerances: hand-built graphs ``atol=rtol=1e-5`` (the same products over the same label; oneDNN
may sum them in another order, float32 last bits: sums of a few products of N(0, 1) values);
the Keras attention layer through the default recipe within the recipe's own tolerance
(:class:`Tolerance` ``()``: atol 1e-4).
"""

import numpy as np
import pytest
from graph_testing import (
    assert_idempotent,
    assert_same_outputs,
    build_graph,
    context,
    op_counts,
    run_graph,
    tf,
)

from tfopt.optimizer.candidates.bf16 import bf16_mixed_precision, bfloat16_nodes
from tfopt.optimizer.optimize.flow import optimize
from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE
from tfopt.optimizer.system.cpu_features import cpu_supports_bf16
from tfopt.optimizer.transforms.einsum_as_batch_matmul import MAX_UNPACKED, batch_matmul_form
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.tolerance import Tolerance

RNG = np.random.default_rng(0)
# label sizes, all different so that a wrong axis fails loudly: batch, heads, query length,
# key length, head size; L and M: more than MAX_UNPACKED entries
SIZES = {"B": 2, "N": 3, "T": 5, "S": 7, "H": 4, "L": MAX_UNPACKED + 1, "M": MAX_UNPACKED + 2}
SCORES, WEIGHTED_VALUES = "BTNH,BSNH->BNTS", "BNTS,BSNH->BTNH"
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}


def _einsum_graph(equation: str, dtype=tf.float32):
    """Placeholders ``a`` (and ``b``) shaped by ``SIZES`` (6 for other labels, none for an
    ellipsis) for the operands of ``equation``, their Einsum named ``einsum``, read by the output
    ``y``."""
    terms = equation.split("->")[0].split(",")

    def body():
        operands = [tf.compat.v1.placeholder(dtype, [SIZES.get(c, 6) for c in term.strip(".")],
                                             name="ab"[i]) for i, term in enumerate(terms)]
        tf.identity(tf.raw_ops.Einsum(inputs=operands, equation=equation, name="einsum"),
                    name="y")
    return build_graph(body)


def _feeds(equation: str) -> dict[str, np.ndarray]:
    terms = equation.split("->")[0].split(",")
    return {"ab"[i]: RNG.standard_normal([SIZES.get(c, 6) for c in term]).astype(np.float32)
            for i, term in enumerate(terms)}


def _transposes(graph_def) -> int:
    """Transposes, as Transpose or as Unpack + Pack."""
    counts = op_counts(graph_def)
    assert counts["Unpack"] == counts["Pack"]
    return counts["Transpose"] + counts["Pack"]


def _rewrite(graph, outputs=("y",)):
    return make_transform("einsum_as_batch_matmul")(graph, context(["a", "b"], outputs))


def _executed_ops(graph_def, feeds, fetch="y") -> set[str]:
    """The op types TensorFlow runs for ``graph_def`` at load (Grappler and oneDNN's rewrite
    included): its partition graphs."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    options = tf.compat.v1.RunOptions(output_partition_graphs=True)
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(f"{fetch}:0", {f"{k}:0": v for k, v in feeds.items()}, options=options,
                    run_metadata=metadata)
    return {n.op for g in metadata.partition_graphs for n in g.node}


def test_attention_scores_become_two_transposes_and_a_batch_matmul_with_adj_y():
    graph = _einsum_graph(SCORES)
    rewritten = _rewrite(graph)

    after = op_counts(rewritten)
    assert after["Einsum"] == 0 and after["BatchMatMulV2"] == 1
    assert after["Unpack"] == after["Pack"] == 2 and after["Transpose"] == 0  # 3 heads
    (product,) = (n for n in rewritten.node if n.op == "BatchMatMulV2")
    assert product.name == "einsum"  # no output Transpose: the product keeps the name
    assert (product.attr["adj_x"].b, product.attr["adj_y"].b) == (False, True)
    assert_same_outputs(graph, rewritten, _feeds(SCORES), ["y"], **TOLERANCE)


def test_attention_weighted_values_become_a_batch_matmul_between_two_transposes():
    graph = _einsum_graph(WEIGHTED_VALUES)
    rewritten = _rewrite(graph)

    after = op_counts(rewritten)
    assert after["Einsum"] == 0 and after["BatchMatMulV2"] == 1
    assert after["Unpack"] == after["Pack"] == 2 and after["Transpose"] == 0
    nodes = {n.name: n for n in rewritten.node}
    assert nodes["einsum"].op == "Pack"  # the output's transpose keeps the Einsum's name
    unpack = nodes[nodes["einsum"].input[0]]
    assert unpack.op == "Unpack" and unpack.attr["axis"].i == 1  # the heads, not the length
    assert nodes[unpack.input[0]].op == "BatchMatMulV2"
    assert_same_outputs(graph, rewritten, _feeds(WEIGHTED_VALUES), ["y"], **TOLERANCE)


@pytest.mark.parametrize("equation, transposes", [
    ("bij,bjk->bik", 0),       # a plain batched product
    ("bij,bkj->bik", 0),       # adj_y
    ("bji,bjk->bik", 0),       # adj_x
    ("bij,bjk->bki", 0),       # the operands swapped, both adjoint: (xy)' = y'x'
    ("ij,jk->ik", 0),          # no batch label
    ("abij,bajk->abik", 1),    # batch labels in another order in one operand
    ("BTNH,BSNH->BNST", 2),    # scores transposed: the operands swapped
    ("NBTH,BNSH->TNBS", 2),    # batch labels as the output orders them; adj_y
    ("BTLH,BSLH->BLTS", 2),    # many heads: q's and k's lengths unpacked instead
    ("BLMH,BSMH->BMLS", 2),    # a long q (L) with many heads (M): q through a Transpose
])
def test_batched_products_up_to_transposes_give_the_same_values(equation, transposes):
    graph = _einsum_graph(equation)
    rewritten = _rewrite(graph)

    after = op_counts(rewritten)
    assert after["Einsum"] == 0 and after["BatchMatMulV2"] == 1
    assert _transposes(rewritten) == transposes
    assert after["Transpose"] == ("M" in equation)
    feeds = _feeds(equation)
    assert_same_outputs(graph, rewritten, feeds, ["y"], **TOLERANCE)
    (got,) = run_graph(rewritten, feeds, ["y"])
    np.testing.assert_allclose(got, np.einsum(equation, feeds["a"], feeds["b"]), **TOLERANCE)


@pytest.mark.parametrize("equation", [
    "...ij,...jk->...ik",   # an ellipsis
    "bii,bij->bj",          # a repeated label
    "bij,bjk->bk",          # i summed over in one operand only
    "bij,jk->bik",          # b broadcast: in one operand only
    "bijl,bjlk->bik",       # two contracted labels
    "bij,bj->bi",           # no free label in the second operand
    "bij->bji",             # one operand (TensorFlow's Einsum takes one or two)
])
def test_other_equations_are_left_alone(equation):
    graph = _einsum_graph(equation)
    assert _rewrite(graph).SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)
    assert batch_matmul_form(equation) is None


def test_an_integer_einsum_is_left_alone():
    graph = _einsum_graph(SCORES, tf.int32)
    assert _rewrite(graph).SerializeToString(deterministic=True) == \
        graph.SerializeToString(deterministic=True)


def test_an_einsum_that_is_a_graph_output_is_left_alone():
    graph = _einsum_graph(SCORES)
    assert op_counts(_rewrite(graph, outputs=("y", "einsum")))["Einsum"] == 1


def test_einsum_as_batch_matmul_twice_changes_nothing():
    assert_idempotent(make_transform("einsum_as_batch_matmul"), _einsum_graph(WEIGHTED_VALUES),
                      context(["a", "b"], ["y"]))


@pytest.mark.parametrize("equation", [SCORES, WEIGHTED_VALUES])
def test_tensorflow_runs_the_rewritten_product_as_a_batch_matmul_kernel(equation):
    feeds = _feeds(equation)
    before = _executed_ops(_einsum_graph(equation), feeds)
    after = _executed_ops(_rewrite(_einsum_graph(equation)), feeds)

    assert before & {"Einsum", "_MklEinsum"}
    assert not after & {"Einsum", "_MklEinsum", "Transpose", "_MklTranspose"}
    # oneDNN's kernel when TensorFlow was built with it and it is on (x86 Linux by default)
    assert after & {"_MklBatchMatMulV2", "BatchMatMulV2"}


def test_keras_multi_head_attention_through_the_default_recipe_keeps_its_outputs(tmp_path):
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((SIZES["T"], 16), name="x")
    attention = keras.layers.MultiHeadAttention(SIZES["N"], SIZES["H"], name="attention")
    keras.Model(x, attention(x, x)).export(str(tmp_path / "attention"), verbose=False)

    result = optimize(tmp_path / "attention", INFERENCE_RECIPE)

    assert op_counts(result.original.graph_def)["Einsum"] == 2  # scores, weighted values
    optimized = op_counts(result.candidate.model.graph_def)
    assert optimized["Einsum"] == 0 and optimized["BatchMatMulV2"] == 2
    assert result.tolerance == Tolerance()
    assert result.accepted, result.divergence()
    if cpu_supports_bf16():  # the bf16 candidate is built from this graph
        candidate = bf16_mixed_precision(result.candidate.model).graph_def
        bf16_ops = {n.op for n in candidate.node if n.name in set(bfloat16_nodes(candidate))}
        assert {"BatchMatMulV2", "Unpack", "Pack"} <= bf16_ops
