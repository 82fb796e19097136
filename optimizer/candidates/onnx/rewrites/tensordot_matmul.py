"""tf2onnx's ``Tensordot`` lowering -> one N-D ``MatMul``.

A Keras ``Dense`` on a rank-3 (or more) input is ``tf.tensordot(x, w, [[-1], [0]])``, which
TensorFlow writes, and tf2onnx converts, as
``Reshape(x, [prod(x.shape[:-1]), K]) -> MatMul(., W[K, N]) -> Reshape(., x.shape[:-1] + [N])``,
both targets computed from ``Shape(x)`` by ``Gather``, ``ReduceProd``, ``Concat`` and ``Cast``
every call. ONNX's ``MatMul`` takes ``x`` as it is: ``MatMul(x[..., K], W[K, N])`` multiplies
every row of the leading dimensions by ``W``, which is what the reshapes spell out.

Exact: ONNX Runtime runs a ``MatMul`` whose second operand is 2-D by folding the first's leading
dimensions into the rows, the same single matrix product (bit-identical outputs, measured). The
rewrite needs symbolic shapes to prove the pattern (:attr:`GraphView.shapes`): ``x``'s last size
is ``W``'s ``K``, the first ``Reshape`` gives ``[rows, K]``, and the second gives exactly
``x.shape[:-1] + [N]``, symbol for symbol. ``W`` must be a 2-D constant, and the intermediate
tensors read by nothing else. Anything else is left alone.
"""

from __future__ import annotations

import onnx
from onnx import helper

from tfopt.optimizer.candidates.onnx.rewrites.graph import GraphView, rebuilt


def _candidates(view: GraphView):
    """``(flatten, matmul, unflatten)`` chains, by their op types alone."""
    for node in view.nodes:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
            continue
        matmul = view.produced_by(node.input[0], "MatMul")
        flatten = matmul and view.produced_by(matmul.input[0], "Reshape")
        weight = matmul and view.constant_shape(matmul.input[1])
        if flatten is None or weight is None or len(weight) != 2:
            continue
        if view.only_reader(flatten.output[0], matmul) and \
                view.only_reader(matmul.output[0], node):
            yield flatten, matmul, node


def tensordot_matmul(model: onnx.ModelProto) -> onnx.ModelProto:
    view = GraphView(model)
    chains = list(_candidates(view))
    if not chains:
        return model  # no shape inference for a graph with nothing to gain
    shapes = view.shapes
    replacements = {}
    for flatten, matmul, unflatten in chains:
        k, n = view.constant_shape(matmul.input[1])
        x = shapes.get(flatten.input[0])
        flat, out = shapes.get(flatten.output[0]), shapes.get(unflatten.output[0])
        if x is None or flat is None or out is None or len(x) < 2 or None in x:
            continue
        if x[-1] != k or len(flat) != 2 or flat[1] != k or tuple(out) != (*x[:-1], n):
            continue
        replacements[view.index_of(flatten)] = []
        replacements[view.index_of(matmul)] = []
        replacements[view.index_of(unflatten)] = [helper.make_node(
            "MatMul", [flatten.input[0], matmul.input[1]], list(unflatten.output),
            name=unflatten.name)]
    return rebuilt(model, replacements) if replacements else model
