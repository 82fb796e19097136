"""quantize_weights: store large float32 constants as 8 bits, turned back into float at load.

GTT semantics (quantize_weights.cc): every float32 ``Const`` with at least ``minimum_size``
elements becomes a quint8 ``<name>_quantized_const`` plus the float scalars
``<name>_quantized_min`` / ``<name>_quantized_max``, read by a ``Dequantize`` (mode
``MIN_FIRST``) that takes the original name, so every consumer still sees a float32 tensor and
nothing downstream needs rewiring. Each weight moves by at most half a step,
``(max - min) / 255 / 2``, with the range widened to include 0.0 as GTT does.

Why: the stored weights shrink about 4x (the artifact, not the arithmetic: the graph still
computes in float32). Use it when the file size matters and an 8-bit error in the weights is
acceptable; the CLI's equivalence check states how much the outputs moved.

Preconditions: a frozen graph (weights are Consts). Left alone: consts in the boundary, other
dtypes, and consts read by ops that need their exact value: the ranges of quantization ops (so
running it twice quantizes nothing new) and the bounds of Range/LinSpace, which set shapes. Run
it after constant folding: folding would turn each Dequantize back into a float constant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tfopt.optimizer.graph.consts import values_from_const
from tfopt.optimizer.graph.quantization import dequantize_node, quantized_const_nodes
from tfopt.optimizer.graph.rewrite import control_inputs
from tfopt.optimizer.graph.traversal import consumers
from tfopt.optimizer.transforms.base import Param, Transform, TransformContext

log = logging.getLogger(__name__)

# Ops whose float inputs are read as exact values, not as data: quantization ranges, and the
# bounds of generated sequences, whose length (a shape) an 8-bit error would change.
_EXACT_VALUE_OP_PREFIXES = ("Quantize", "Dequantize", "Requantiz", "FakeQuant")
_EXACT_VALUE_OPS = frozenset({"Range", "LinSpace"})


def _needs_exact_value(op: str) -> bool:
    return op in _EXACT_VALUE_OPS or op.startswith(_EXACT_VALUE_OP_PREFIXES)


@dataclass(frozen=True)
class SizeReport:
    """How much quantize_weights saved, for the log and the CLI."""

    consts_quantized: int
    bytes_before: int
    bytes_after: int

    @property
    def ratio(self) -> float:
        return self.bytes_before / self.bytes_after if self.bytes_after else float("inf")

    def __str__(self) -> str:
        return (f"{self.consts_quantized} float32 constant(s) stored as 8-bit: graph "
                f"{self.bytes_before / 1024:.1f} KiB -> {self.bytes_after / 1024:.1f} KiB "
                f"({self.ratio:.2f}x smaller)")


def size_report(before, after) -> SizeReport:
    """Compare a graph with its quantize_weights result: constants quantized, bytes saved."""
    def dequantized(graph_def) -> int:
        return sum(1 for n in graph_def.node if n.op == "Dequantize" and n.input
                   and n.input[0] == f"{n.name}_quantized_const")
    return SizeReport(consts_quantized=dequantized(after) - dequantized(before),
                      bytes_before=before.ByteSize(), bytes_after=after.ByteSize())


class QuantizeWeights(Transform):
    name = "quantize_weights"
    params = (
        Param("minimum_size", int, 1024,
              "float32 constants with fewer elements than this stay float"),
    )

    def transform(self, graph_def, context: TransformContext):
        from tensorflow.core.framework import graph_pb2, types_pb2
        from tensorflow.python.framework import dtypes

        readers = consumers(graph_def)
        taken = {n.name for n in graph_def.node}
        result = graph_pb2.GraphDef()
        result.CopyFrom(graph_def)  # versions, library: everything but the nodes stays as is
        del result.node[:]
        for node in graph_def.node:
            if node.op != "Const" or node.attr["dtype"].type != types_pb2.DT_FLOAT:
                result.node.add().CopyFrom(node)
                continue
            reason = self._reason_to_keep(node, context, readers, taken)
            if reason:
                log.debug("quantize_weights: %s left float: %s", node.name, reason)
                result.node.add().CopyFrom(node)
                continue
            values = values_from_const(node)
            result.node.extend(quantized_const_nodes(node.name, values, node.device,
                                                     control_inputs(node)))
            result.node.append(dequantize_node(
                node.name, f"{node.name}_quantized_const", f"{node.name}_quantized_min",
                f"{node.name}_quantized_max", dtypes.quint8, node.device))
        log.info("quantize_weights: %s", size_report(graph_def, result))
        return result

    def _reason_to_keep(self, node, context: TransformContext, readers, taken) -> str | None:
        if node.name in context.boundary:
            return "in the graph's boundary"
        size = 1
        for dim in node.attr["value"].tensor.tensor_shape.dim:
            size *= dim.size
        if size < self["minimum_size"]:
            return f"{size} elements < minimum_size {self['minimum_size']}"
        exact = sorted({r.op for r in readers.get(node.name, []) if _needs_exact_value(r.op)})
        if exact:
            return f"read as an exact value by {', '.join(exact)}"
        clash = [s for s in ("_quantized_const", "_quantized_min", "_quantized_max")
                 if node.name + s in taken]
        if clash:
            return f"a node named {node.name}{clash[0]} already exists"
        return None
