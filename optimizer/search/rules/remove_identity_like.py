"""remove_identity_like: an op that returns its input unchanged is bypassed.

Identity-like, each under the condition that makes it return exactly its input:

- ``Identity``, ``Snapshot``, ``StopGradient`` (at inference time);
- ``Reshape`` whose static output shape equals its input's (rank known, at most one unknown
  dimension: the element count then fixes it);
- ``Cast`` to its own dtype;
- ``Transpose`` by a constant identity permutation;
- ``Mul`` by a Const of ones and ``Add``/``AddV2`` of a Const of zeros, exact values, when the
  constant cannot broadcast the other operand to a bigger shape (its rank is at most the
  operand's and each of its dimensions is 1 or the operand's known size).

The node's consumers read its input instead; constants nothing reads afterwards are removed.
Preconditions, as remove_nodes has them (``why_not_bypassable``): no control inputs, no control
edge on the node, not an input, output or protected node, not reading a control-flow op or
feeding a Merge/NextIteration/Exit, only output 0 read; and, stricter, the node does not run
inside lowered control flow (there an Identity can carry a frame or a branch).
"""

from __future__ import annotations

import logging

import numpy as np

from tfopt.optimizer.graph.const_eval import is_pure
from tfopt.optimizer.graph.consts import resolve_through_identity, values_from_const
from tfopt.optimizer.graph.control_flow import nodes_under_control_flow
from tfopt.optimizer.graph.names import canonical_input, is_control_input, node_name_from_input
from tfopt.optimizer.graph.rewrite import remove_unread
from tfopt.optimizer.graph.shapes import infer_shapes, static_shape
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.search.substitution import Match, Substitution
from tfopt.optimizer.transforms.base import TransformContext
from tfopt.optimizer.transforms.remove_nodes import bypass_nodes, why_not_bypassable

log = logging.getLogger(__name__)

_FORWARDING = frozenset({"Identity", "Snapshot", "StopGradient"})
_NEUTRAL = {"Mul": 1, "Add": 0, "AddV2": 0}
_CANDIDATES = _FORWARDING | frozenset({"Reshape", "Cast", "Transpose"}) | frozenset(_NEUTRAL)


class RemoveIdentityLike(Substitution):
    name = "remove_identity_like"
    description = "bypass an op that returns its input unchanged (Identity, x*1, x+0, ...)"
    commutes = True

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        if not any(n.op in _CANDIDATES for n in graph_def.node):
            return []
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        controlled = {node_name_from_input(i) for n in graph_def.node for i in n.input
                      if is_control_input(i)}
        in_control_flow = nodes_under_control_flow(graph_def)
        inferred = []

        def shapes() -> dict:
            # Importing the graph to infer shapes is the costly step: only when a node needs it.
            if not inferred:
                inferred.append(infer_shapes(graph_def))
            return inferred[0]

        found = []
        for node in graph_def.node:
            if node.op not in _CANDIDATES or node.name in in_control_flow:
                continue
            source = self._passed_through(node, by_name, shapes)
            if source is None:
                continue
            why = why_not_bypassable(node, source, by_name, readers, controlled,
                                     context.boundary)
            if why is not None:
                log.debug("%s: keeping %s (%s): %s", self.name, node.name, node.op, why)
                continue
            found.append(Match(self.name, (node.name,), {"input": canonical_input(source)}))
        return found

    def _passed_through(self, node, by_name, shapes) -> str | None:
        """The input ``node`` returns unchanged, or None if it may change it; ``shapes()``
        gives the graph's static shapes."""
        data = [i for i in node.input if not is_control_input(i)]
        if node.op in _FORWARDING:
            return data[0] if len(data) == 1 else None
        if node.op == "Cast":
            return data[0] if node.attr["SrcT"].type == node.attr["DstT"].type else None
        if node.op == "Reshape":
            before = static_shape(shapes(), data[0])
            after = static_shape(shapes(), node.name)
            if before is not None and before == after and before.count(None) <= 1:
                return data[0]
            return None
        if node.op == "Transpose":
            perm = _const_value(by_name, data[1])
            if perm is not None and np.array_equal(perm, np.arange(perm.size)) \
                    and _rank(shapes(), data[0]) == perm.size:
                return data[0]
            return None
        neutral = _NEUTRAL[node.op]
        for operand, other in ((data[0], data[1]), (data[1], data[0])):
            value = _const_value(by_name, other)
            if (value is not None and value.size > 0 and np.all(value == neutral)
                    and _broadcasts_into(value.shape, static_shape(shapes(), operand))):
                return operand
        log.debug("%s: %s has no exact %s operand that keeps the shape", self.name, node.name,
                  neutral)
        return None

    def apply(self, graph_def, match: Match, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        [name] = match.nodes
        result = graph_pb2.GraphDef()
        result.CopyFrom(graph_def)
        node = nodes_by_name(result).get(name)
        if node is None or match.detail["input"] not in (canonical_input(i) for i in node.input):
            raise ValueError(f"{match.describe()} does not apply to this graph")
        leftovers = [node_name_from_input(i) for i in node.input]
        result = bypass_nodes(result, {name: match.detail["input"]})
        remove_unread(result, leftovers, context.boundary, is_pure)
        return result


def _const_value(by_name, tensor: str):
    node = resolve_through_identity(by_name, tensor)
    return values_from_const(node) if node is not None and node.op == "Const" else None


def _rank(shapes, tensor: str) -> int | None:
    shape = static_shape(shapes, tensor)
    return None if shape is None else len(shape)


def _broadcasts_into(const_shape: tuple, shape) -> bool:
    """Broadcasting a tensor of ``const_shape`` against one of ``shape`` leaves ``shape``."""
    if shape is None or len(const_shape) > len(shape):
        return False
    return all(c == 1 or c == s for c, s in zip(reversed(const_shape), reversed(shape)))
