"""einsum_as_batch_matmul: a two-operand ``Einsum`` that is a batched matrix product up to
transposes, written as transposes + ``BatchMatMulV2`` (its adjoints in place of a transpose where
they do) + a transpose of its output if needed.

Why: Keras 3's ``MultiHeadAttention`` computes each layer's attention with two ``Einsum``s,
scores ``BTNH,BSNH->BNTS`` and weighted values ``BNTS,BSNH->BTNH``. TensorFlow runs them as
oneDNN's ``_MklEinsum``, slower than the same product as ``_MklBatchMatMulV2``. But TensorFlow
also runs every ``Transpose`` as ``_MklTranspose``, which took 61-95 us for ``[1, 64, 4, 64]``
with perm ``[0, 2, 1, 3]`` where ``Unpack`` + ``Pack`` took 7 us: with Transposes the BERT
encoder got slower (0.87x), so a transpose that moves one axis of at most ``MAX_UNPACKED``
entries (the heads) is written as ``Unpack`` along that axis + ``Pack`` at its new position,
which TensorFlow runs with its own kernels. Measured on the BERT encoder at batch 1 (one
process, paired rounds, docs/transformers.md): the default recipe 1.06x faster with this
transform, its bf16 candidate 1.17x (2.31x the stock call).

Which equations: ``a,b->out`` without an ellipsis, no label twice in one term, every output
label in an operand, and its labels in four groups: batch labels (in both operands and the
output), exactly one contracted label (in both operands, not in the output) and exactly one free
label per operand (in that operand and the output only). That is a batched matrix product
``[batch..., m, k] x [batch..., k, n] -> [batch..., m, n]`` whose terms are permuted. The rewrite
orders the batch labels as the output does, then picks, of the two operand orders and the
adjoints, the one needing the fewest transposes, then the fewest that move the last axis (ties:
the operands as given, no adjoint). The attention scores become ``q`` and ``k`` with their heads
moved before their lengths, read with ``adj_y``; the weighted values ``v`` the same way, and the
product's heads moved back after its length.

Values: the same products summed over the same label; oneDNN may sum in another order, so
float32 results can differ in the last bits. Named labels must have equal sizes in an ``Einsum``
(only an ellipsis broadcasts), so ``BatchMatMulV2``'s broadcasting never comes into play.

The last node keeps the Einsum's name (nothing downstream is rewired). Left alone: any other
equation (an ellipsis, a repeated label, a label summed over in one operand only, none or
several contracted or free labels, one operand), a type other than float32, bfloat16 and
float16, and an Einsum that is an input, output or protected node. A transpose whose moved
axis has no static size, or more than ``MAX_UNPACKED`` entries, stays a ``Transpose``.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.graph.names import canonical_input, is_control_input
from tfopt.optimizer.graph.rewrite import DT_INT32, FLOAT_TYPES, add_node, attr_value, replace_node
from tfopt.optimizer.graph.shapes import infer_shapes, static_shape
from tfopt.optimizer.graph.traversal import nodes_by_name
from tfopt.optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)

# A transpose that moves one axis of at most this many entries is written as Unpack + Pack:
# TensorFlow runs Transpose as oneDNN's _MklTranspose, 61-95 us for [1, 64, N, 64] with perm
# [0, 2, 1, 3] at N = 4 to 32, where Unpack + Pack took 7 us at N = 4 and 15 us at N = 12, but
# 68-107 us at N = 16 and 32 (2 threads, chains of 16, docs/transformers.md).
MAX_UNPACKED = 12


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


def moved_axes(perm: tuple[int, ...]) -> list[tuple[int, int]]:
    """Each ``(axis, position)`` such that ``perm`` moves that one axis to that position and
    keeps the others in order (``[0, 2, 1, 3]``: axis 2 to position 1, or axis 1 to 2)."""
    return [(axis, position) for position, axis in enumerate(perm)
            if position != axis and _ascending([a for a in perm if a != axis])]


def _ascending(axes: list[int]) -> bool:
    return axes == sorted(axes)


def _perm(term: str, order: list[str]) -> tuple[int, ...] | None:
    """The Transpose perm taking ``term``'s axes to ``order``, None when it is the identity."""
    perm = tuple(term.index(label) for label in order)
    return None if perm == tuple(range(len(perm))) else perm


class EinsumAsBatchMatmul(Transform):
    name = "einsum_as_batch_matmul"
    params = ()

    def transform(self, graph_def, context: TransformContext):
        found = [(n, p) for n in graph_def.node if n.op == "Einsum"
                 for p in [self._product(n, context.boundary)] if p is not None]
        if not found:
            return graph_def
        by_name = nodes_by_name(graph_def)
        shapes = infer_shapes(graph_def)
        for einsum, product in found:
            self._rewrite(graph_def, by_name, shapes, einsum, product)
        log.debug("%s: %d Einsums made BatchMatMulV2", self.name, len(found))
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
    def _rewrite(graph_def, by_name, shapes, einsum, product: Product) -> None:
        device, prefix = einsum.device, einsum.name
        dtype = attr_value()
        dtype.CopyFrom(einsum.attr["T"])  # a copy: the Einsum is cleared below
        data = [canonical_input(i) for i in einsum.input if not is_control_input(i)]
        controls = [i for i in einsum.input if is_control_input(i)]
        x, y = reversed(data) if product.swapped else data

        def transpose(tensor: str, shape, perm, base: str, name: str | None = None) -> str:
            """``tensor`` transposed by ``perm`` (None: as it is); the last node is called
            ``name`` (the Einsum, cleared for it) or a new one from ``base``."""
            if perm is None:
                return tensor
            sizes = [(shape[axis], axis, position) for axis, position in moved_axes(perm)
                     if shape is not None and shape[axis] is not None]
            count, axis, position = min(sizes, default=(None, None, None))
            if count is not None and count <= MAX_UNPACKED:
                unpack = add_node(graph_def, by_name, "Unpack", f"{prefix}/{base}_unpack",
                                  [tensor], device, {"T": dtype, "num": attr_value(i=count),
                                                     "axis": attr_value(i=axis)})
                op, inputs = "Pack", [f"{unpack.name}:{i}" if i else unpack.name
                                      for i in range(count)]
                attrs = {"T": dtype, "N": attr_value(i=count), "axis": attr_value(i=position)}
            else:
                const = add_node(graph_def, by_name, "Const", f"{prefix}/{base}_perm",
                                 device=device, value=np.array(perm, np.int32))
                op, inputs = "Transpose", [tensor, const.name]
                attrs = {"T": dtype, "Tperm": attr_value(type=DT_INT32)}
            if name is None:
                return add_node(graph_def, by_name, op, f"{prefix}/{base}", inputs, device,
                                attrs).name
            replace_node(einsum, op, inputs + controls, attrs)
            return name

        inputs = [transpose(x, static_shape(shapes, x), product.x_perm, "x_transpose"),
                  transpose(y, static_shape(shapes, y), product.y_perm, "y_transpose")]
        attrs = {"T": dtype, "adj_x": attr_value(b=product.adj_x),
                 "adj_y": attr_value(b=product.adj_y)}
        if product.out_perm is None:
            # The Einsum keeps its name as the product; its control inputs move there.
            replace_node(einsum, "BatchMatMulV2", inputs + controls, attrs)
            return
        matmul = add_node(graph_def, by_name, "BatchMatMulV2", f"{prefix}/batch_matmul",
                          inputs, device, attrs)
        output_shape = static_shape(shapes, prefix)
        product_shape = None if output_shape is None else tuple(
            output_shape[product.out_perm.index(i)] for i in range(len(output_shape)))
        # The Einsum keeps its name as the transpose of the product.
        transpose(matmul.name, product_shape, product.out_perm, "output", name=prefix)

