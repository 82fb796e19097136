"""merge_duplicate_subgraphs: one of two nodes that compute the same thing is dropped.

Two nodes are duplicates under merge_duplicate_nodes' own definition (its ``identity_key``): the
same op, data inputs in the same order, control inputs, device and attrs, with Consts compared
by value. The dropped node's consumers read the kept one. Each match merges ONE pair, so the
search can cost each step; merging two nodes can make their consumers duplicates, which the next
``matches`` then finds, so whole duplicate subgraphs merge one node at a time.

Never merged, as in the transform: stateful ops (two random draws are not one), Placeholders,
control-flow ops, function calls and ops unknown to the registry. A node in ``context.boundary``
is never dropped: within a group of duplicates the kept node is the first boundary node, or else
the first in graph order, and a second boundary node of the group is left alone.
"""

from __future__ import annotations

import logging

from tfopt.optimizer.graph.colocation import redirect_colocation
from tfopt.optimizer.graph.const_eval import is_pure
from tfopt.optimizer.search.substitution import Match, Substitution
from tfopt.optimizer.transforms.base import TransformContext
from tfopt.optimizer.transforms.merge_duplicate_nodes import identity_key, rewire_dropped

log = logging.getLogger(__name__)


class MergeDuplicateSubgraphs(Substitution):
    name = "merge_duplicate_subgraphs"
    description = "drop a node that duplicates another; its consumers read the kept copy"
    commutes = True

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        groups: dict[tuple, list[str]] = {}
        for node in graph_def.node:
            if is_pure(node):
                groups.setdefault(identity_key(node), []).append(node.name)
        found = []
        for names in groups.values():
            if len(names) < 2:
                continue
            kept = next((n for n in names if n in context.boundary), names[0])
            for name in names:
                if name == kept:
                    continue
                if name in context.boundary:
                    log.debug("%s: %s and %s are both boundary nodes", self.name, kept, name)
                    continue
                found.append(Match(self.name, (kept, name)))
        order = {node.name: i for i, node in enumerate(graph_def.node)}
        return sorted(found, key=lambda m: order[m.nodes[1]])

    def apply(self, graph_def, match: Match, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        kept, dropped = match.nodes
        by_name = {n.name: n for n in graph_def.node}
        if (kept not in by_name or dropped not in by_name or dropped in context.boundary
                or identity_key(by_name[kept]) != identity_key(by_name[dropped])):
            raise ValueError(f"{match.describe()} does not apply to this graph")
        private = graph_pb2.GraphDef()
        private.CopyFrom(graph_def)
        result = rewire_dropped(private, {dropped: kept}, graph_pb2)
        redirect_colocation(result, {dropped: kept})
        return result
