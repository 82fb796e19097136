"""remove_nodes: bypass nodes of the listed op types, e.g. ``remove_nodes(op=Identity, op=CheckNumerics)``.

GTT semantics: a node of a listed op with exactly one data input is taken out of the graph and
its consumers read that input instead (``node`` becomes ``input:k``, keeping the input's output
index). Inputs and outputs of the graph are never removed; running until nothing changes.

Unlike GTT, which breaks models with control flow or control dependencies, a node stays when:

- it has control inputs, or another node has a control input on it (GTT silently drops or
  moves such edges; in lowered control flow they carry a node's frame or branch);
- it reads a control-flow op (an Identity after a Switch is a cond pivot or a loop body's
  input; after Enter/Merge/Exit it belongs to the loop's structure), or feeds a Merge,
  NextIteration or Exit (the loop's back edge and exits must keep their own node);
- a consumer reads an output other than 0 (a one-input op passes through only output 0);
- it is itself a control-flow op, even if listed.

Precondition: none beyond a valid graph. Use ``remove_control_dependencies`` first to let this
remove Identity nodes that only carry control edges outside control flow.
"""

from __future__ import annotations

import logging

from tfopt.optimizer.graph.colocation import redirect_colocation
from tfopt.optimizer.graph.control_flow import (
    CONTROL_FLOW_OPS,
    EXIT_OPS,
    MERGE_OPS,
    NEXT_ITERATION_OPS,
)
from tfopt.optimizer.graph.names import (
    canonical_input,
    is_control_input,
    node_name_from_input,
    output_index,
)
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.transforms.base import Param, Transform, TransformConfigError, TransformContext

log = logging.getLogger(__name__)

# A loop's Merge, NextIteration and Exit are wired by frame rules: the node feeding them stays.
_STRUCTURAL_CONSUMERS = MERGE_OPS | NEXT_ITERATION_OPS | EXIT_OPS


class RemoveNodes(Transform):
    name = "remove_nodes"
    params = (
        Param("op", str, (), "op type to remove, e.g. Identity; repeat for several", repeated=True),
    )

    def __init__(self, **values):
        super().__init__(**values)
        if not self["op"]:
            raise TransformConfigError(
                "remove_nodes expects at least one 'op' argument, e.g. remove_nodes(op=Identity)")

    def transform(self, graph_def, context: TransformContext):
        listed = set(self["op"])
        for op in sorted(listed & CONTROL_FLOW_OPS):
            log.debug("remove_nodes: never removes control-flow op %s", op)
        while True:
            bypass = self._removable(graph_def, listed - CONTROL_FLOW_OPS, context)
            if not bypass:
                return graph_def
            graph_def = bypass_nodes(graph_def, bypass)

    def _removable(self, graph_def, ops: set[str], context: TransformContext) -> dict[str, str]:
        """Name of each node to remove -> the data input its consumers read instead."""
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        controlled = {node_name_from_input(i) for n in graph_def.node for i in n.input
                      if is_control_input(i)}
        bypass = {}
        for node in graph_def.node:
            if node.op not in ops:
                continue
            data = [i for i in node.input if not is_control_input(i)]
            if len(data) != 1 or len(data) != len(node.input):
                why = "it has control inputs" if len(data) == 1 else f"{len(data)} data inputs"
            else:
                why = why_not_bypassable(node, data[0], by_name, readers, controlled,
                                         context.boundary)
            if why is None:
                bypass[node.name] = canonical_input(data[0])
                continue
            log.debug("remove_nodes: keeping %s (%s): %s", node.name, node.op, why)
        return bypass


def why_not_bypassable(node, data_input: str, by_name: dict, readers: dict,
                       controlled: set[str], boundary) -> str | None:
    """Why consumers of ``node`` may not read ``data_input`` instead, or None if they may.

    ``controlled`` holds the names of nodes some node has a control input on.
    """
    if any(is_control_input(i) for i in node.input):
        return "it has control inputs"
    if node.name in boundary:
        return "it is a graph input, output or protected node"
    if node.name in controlled:
        return "other nodes have a control input on it"
    if by_name[node_name_from_input(data_input)].op in CONTROL_FLOW_OPS:
        return f"it reads a {by_name[node_name_from_input(data_input)].op}"
    if any(r.op in _STRUCTURAL_CONSUMERS for r in readers.get(node.name, ())):
        return "it feeds a Merge, NextIteration or Exit"
    if any(output_index(i) != 0 for r in readers.get(node.name, ()) for i in r.input
           if not is_control_input(i) and node_name_from_input(i) == node.name):
        return "a consumer reads an output other than 0"
    return None


def bypass_nodes(graph_def, bypass: dict[str, str]):
    """A copy of ``graph_def`` without the ``bypass`` nodes, their data consumers reading the
    input each maps to (``graph_def`` itself is rewired on the way)."""
    from tensorflow.core.framework import graph_pb2

    def target(input_name: str) -> str:
        seen = set()
        while node_name_from_input(input_name) in bypass and input_name not in seen:
            seen.add(input_name)
            input_name = bypass[node_name_from_input(input_name)]
        return input_name

    for node in graph_def.node:
        for k, inp in enumerate(node.input):
            # Only data inputs can name a removed node: nodes with control consumers stay.
            if not is_control_input(inp) and node_name_from_input(inp) in bypass:
                node.input[k] = target(inp)
    result = graph_pb2.GraphDef()
    result.CopyFrom(graph_def)
    del result.node[:]
    result.node.extend(n for n in graph_def.node if n.name not in bypass)
    redirect_colocation(result, {name: node_name_from_input(target(name)) for name in bypass})
    return result
