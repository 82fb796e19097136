"""merge_duplicate_nodes: keep one copy of nodes that compute the same thing.

GTT semantics: two nodes are duplicates when they have the same op, the same data inputs in the
same order, the same control inputs, the same device and the same attrs; consumers of the
dropped copy read the kept one instead, and this repeats until nothing changes (merging two
nodes can make their consumers duplicates). Const nodes are compared by value (dtype, shape and
contents), so two encodings of the same tensor merge too.

Never merged: stateful ops (random, I/O, asserts: two draws are not one), ops unknown to the
op registry, Placeholders (two inputs are two inputs), control-flow ops and function calls. A node in
``context.boundary`` is never dropped; a duplicate of it is merged into it. The kept copy is the
first in graph order (or the first boundary node among the copies).
"""

from __future__ import annotations

import logging

from tfopt.optimizer.graph.colocation import redirect_colocation
from tfopt.optimizer.graph.const_eval import is_pure
from tfopt.optimizer.graph.consts import values_from_const
from tfopt.optimizer.graph.names import (
    canonical_input,
    is_control_input,
    node_name_from_input,
    output_index,
)
from tfopt.optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)


class MergeDuplicateNodes(Transform):
    name = "merge_duplicate_nodes"

    def transform(self, graph_def, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        boundary = context.boundary
        while True:
            kept_by_key: dict[tuple, str] = {}
            dropped: dict[str, str] = {}
            for node in graph_def.node:
                if not is_pure(node):  # stateful, a Placeholder, control flow, a call
                    continue
                key = identity_key(node)
                kept = kept_by_key.setdefault(key, node.name)
                if kept == node.name:
                    continue
                if node.name in boundary:
                    if kept not in boundary:
                        # The boundary node takes over; the copy kept so far is dropped.
                        dropped[kept] = node.name
                        kept_by_key[key] = node.name
                    continue
                dropped[node.name] = kept
            if not dropped:
                break
            # A node dropped in favour of a boundary node may have been kept for others first.
            for name, kept in dropped.items():
                while kept in dropped:
                    kept = dropped[kept]
                dropped[name] = kept
            log.debug("merge_duplicate_nodes: merging %d nodes", len(dropped))
            graph_def = rewire_dropped(graph_def, dropped, graph_pb2)
            # Before the next round, so that colocation on a dropped node hides no duplicate.
            redirect_colocation(graph_def, dropped)
        return graph_def


def identity_key(node) -> tuple:
    """Everything that determines what a node computes, in a hashable form."""
    data = tuple(canonical_input(i) for i in node.input if not is_control_input(i))
    controls = tuple(sorted({i for i in node.input if is_control_input(i)}))
    attrs = []
    for name in sorted(node.attr):
        if node.op == "Const" and name == "value":
            attrs.append((name, _const_value_key(node)))
        else:
            attrs.append((name, node.attr[name].SerializeToString(deterministic=True)))
    return (node.op, node.device, data, controls, tuple(attrs))


def _const_value_key(node) -> tuple:
    import numpy as np

    value = values_from_const(node)
    if value.dtype == object:  # strings: compare the proto, numpy bytes are pointers
        return ("proto", node.attr["value"].SerializeToString(deterministic=True))
    return (str(value.dtype), value.shape, np.ascontiguousarray(value).tobytes())


def rewire_dropped(graph_def, dropped: dict[str, str], graph_pb2):
    """A copy of ``graph_def`` without the ``dropped`` nodes, their consumers reading the node
    each maps to (``graph_def`` itself is rewired on the way)."""
    for node in graph_def.node:
        if node.name in dropped:
            continue
        rewired = []
        for inp in node.input:
            source = node_name_from_input(inp)
            if source in dropped:
                inp = f"^{dropped[source]}" if is_control_input(inp) else \
                    canonical_input(f"{dropped[source]}:{output_index(inp)}")
            if not (is_control_input(inp) and inp in rewired):
                rewired.append(inp)
        if rewired != list(node.input):
            del node.input[:]
            node.input.extend(rewired)
    result = graph_pb2.GraphDef()
    result.CopyFrom(graph_def)
    del result.node[:]
    result.node.extend(n for n in graph_def.node if n.name not in dropped)
    return result
