"""einsum_as_batch_matmul: a two-operand ``Einsum`` that is a batched matrix product up to
transposes, written as ``Transpose``s + ``BatchMatMulV2`` (its adjoints in place of a Transpose
where they do) + an output ``Transpose`` if needed.

Why: Keras 3's ``MultiHeadAttention`` computes each layer's attention with two ``Einsum``s,
scores ``BTNH,BSNH->BNTS`` and weighted values ``BNTS,BSNH->BTNH``. TensorFlow runs them as
``_MklEinsum``, which oneDNN runs slower than the same product as ``BatchMatMulV2``: at the BERT
encoder's sizes (``[1, 64, 4, 64]``, 2 threads) the attention pair as two Einsums took 204 us
and as Transposes + ``BatchMatMulV2`` 151 us in float32, 167 and 121 us in bfloat16
(docs/transformers.md, with what it measured in the whole encoder).

Which equations: ``a,b->out`` without an ellipsis, no label twice in one term, every output
label in an operand, and its labels in four groups: batch labels (in both operands and the
output), exactly one contracted label (in both operands, not in the output) and exactly one free
label per operand (in that operand and the output only). That is a batched matrix product
``[batch..., m, k] x [batch..., k, n] -> [batch..., m, n]`` whose terms are permuted. The rewrite
orders the batch labels as the output does, then picks, of the two operand orders and the
adjoints, the one needing the fewest Transposes, then the fewest that move the last axis (ties:
the operands as given, no adjoint). The attention scores become ``Transpose(q, [0, 2, 1, 3])``
and ``Transpose(k, [0, 2, 1, 3])`` read with ``adj_y``; the weighted values ``Transpose(v, [0,
2, 1, 3])`` and the product's output transposed back the same way.

Values: the same products summed over the same label; oneDNN may sum in another order, so
float32 results can differ in the last bits. Named labels must have equal sizes in an ``Einsum``
(only an ellipsis broadcasts), so ``BatchMatMulV2``'s broadcasting never comes into play.

The last node keeps the Einsum's name (nothing downstream is rewired). Left alone: any other
equation (an ellipsis, a repeated label, a label summed over in one operand only, none or
several contracted or free labels, one operand), a type other than float32, bfloat16
and float16, and an Einsum that is an input, output or protected node.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import numpy as np

from optimizer.graph.names import canonical_input, is_control_input
from optimizer.graph.rewrite import add_node
from optimizer.graph.traversal import nodes_by_name
from optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)

FLOAT_TYPES = frozenset({1, 14, 19})  # DT_FLOAT, DT_BFLOAT16, DT_HALF (types.proto)


@dataclass(frozen=True)
class Product:
    """A batched matrix product of terms given as label strings: the Transposes it needs
    (``None`` for none) around ``BatchMatMulV2(x, y, adj_x, adj_y)``."""

    swapped: bool  # x is the Einsum's second operand
    x_perm: tuple[int, ...] | None
    y_perm: tuple[int, ...] | None
    adj_x: bool
    adj_y: bool
    out_perm: tuple[int, ...] | None

    @property
    def cost(self) -> tuple[int, int]:
        """Transposes, then those that move the last axis (a copy with a stride of its own
        for each element, where one keeping it moves whole rows)."""
        perms = [p for p in (self.x_perm, self.y_perm, self.out_perm) if p is not None]
        return len(perms), sum(p[-1] != len(p) - 1 for p in perms)


def batch_matmul_form(equation: str) -> Product | None:
    """The cheapest :class:`Product` computing ``equation``, or None when it is not a batched
    matrix product up to transposes (see the module docstring)."""
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if not arrow or len(terms) != 2 or "." in equation:
        return None
    a, b = terms
    if any(len(set(t)) != len(t) or not t.isalpha() for t in (a, b)) \
            or len(set(output)) != len(output) or not output.isalpha() \
            or not set(output) <= set(a) | set(b):
        return None
    batch = [label for label in output if label in a and label in b]
    contracted = [label for label in a if label in b and label not in output]
    free_a = [label for label in a if label not in b]
    free_b = [label for label in b if label not in a]
    if (len(contracted), len(free_a), len(free_b)) != (1, 1, 1) \
            or not set(free_a + free_b) <= set(output):
        return None
    (k,) = contracted
    options = []
    for swapped, adj_x, adj_y in itertools.product((False, True), repeat=3):
        (x, m), (y, n) = ((b, free_b[0]), (a, free_a[0])) if swapped else \
            ((a, free_a[0]), (b, free_b[0]))
        x_order = [*batch, *((k, m) if adj_x else (m, k))]
        y_order = [*batch, *((n, k) if adj_y else (k, n))]
        options.append(Product(swapped, _perm(x, x_order), _perm(y, y_order), adj_x, adj_y,
                               _perm("".join([*batch, m, n]), list(output))))
    return min(options, key=lambda p: p.cost)  # min keeps the first of equals


def _perm(term: str, order: list[str]) -> tuple[int, ...] | None:
    """The Transpose perm taking ``term``'s axes to ``order``, None when it is the identity."""
    perm = tuple(term.index(label) for label in order)
    return None if perm == tuple(range(len(perm))) else perm


class EinsumAsBatchMatmul(Transform):
    name = "einsum_as_batch_matmul"
    params = ()

    def transform(self, graph_def, context: TransformContext):
        by_name = nodes_by_name(graph_def)
        rewritten = 0
        for node in list(graph_def.node):
            if node.op != "Einsum":
                continue
            product = self._product(node, context.boundary)
            if product is None:
                continue
            self._rewrite(graph_def, by_name, node, product)
            rewritten += 1
        log.debug("%s: %d Einsums made BatchMatMulV2", self.name, rewritten)
        return graph_def

    def _product(self, einsum, boundary) -> Product | None:
        data = [i for i in einsum.input if not is_control_input(i)]
        equation = einsum.attr["equation"].s.decode()
        product = batch_matmul_form(equation) if len(data) == 2 else None
        if product is None or einsum.attr["T"].type not in FLOAT_TYPES \
                or einsum.name in boundary:
            log.debug("%s: %s (%s) left alone", self.name, einsum.name, equation)
            return None
        return product

    @staticmethod
    def _rewrite(graph_def, by_name, einsum, product: Product) -> None:
        from tensorflow.core.framework import attr_value_pb2

        device, prefix = einsum.device, einsum.name
        dtype = attr_value_pb2.AttrValue()
        dtype.CopyFrom(einsum.attr["T"])  # a copy: the Einsum is cleared below
        int32 = attr_value_pb2.AttrValue(type=3)  # DT_INT32
        data = [canonical_input(i) for i in einsum.input if not is_control_input(i)]
        controls = [i for i in einsum.input if is_control_input(i)]
        x, y = reversed(data) if product.swapped else data

        def transposed(tensor: str, perm, base: str) -> str:
            if perm is None:
                return tensor
            const = add_node(graph_def, by_name, "Const", f"{prefix}/{base}_perm", device=device,
                             value=np.array(perm, np.int32))
            return add_node(graph_def, by_name, "Transpose", f"{prefix}/{base}",
                            [tensor, const.name], device, {"T": dtype, "Tperm": int32}).name

        inputs = [transposed(x, product.x_perm, "x_transpose"),
                  transposed(y, product.y_perm, "y_transpose")]
        attrs = {"T": dtype, "adj_x": attr_value_pb2.AttrValue(b=product.adj_x),
                 "adj_y": attr_value_pb2.AttrValue(b=product.adj_y)}
        if product.out_perm is not None:
            matmul = add_node(graph_def, by_name, "BatchMatMulV2", f"{prefix}/batch_matmul",
                              inputs, device, attrs)
            perm = add_node(graph_def, by_name, "Const", f"{prefix}/output_perm", device=device,
                            value=np.array(product.out_perm, np.int32))
            op, inputs, attrs = "Transpose", [matmul.name, perm.name], \
                {"T": dtype, "Tperm": int32}
        else:
            op = "BatchMatMulV2"
        # The Einsum keeps its name as the last node; its control inputs move there.
        einsum.Clear()
        einsum.name, einsum.op, einsum.device = prefix, op, device
        einsum.input.extend([*inputs, *controls])
        for key, attr in attrs.items():
            einsum.attr[key].CopyFrom(attr)
