"""unroll_static_loops: a While loop with a constant trip count -> its body, once per trip.

The rule form of the ``unroll_static_loops`` transform (same analysis and rewrite:
:mod:`tfopt.optimizer.graph.static_loops`, :mod:`tfopt.optimizer.graph.tensor_lists`), one loop per match.
Unrolling alone may cost about what the loop did, or more (a copy of every body op per trip,
slices and a Pack for the TensorLists): it is the relaxed search's kind of step, kept within
``alpha`` because the copies it exposes are what other rules rewrite next (duplicate weights
and constants merged, Identity copies bypassed, a step's MatMuls merged) where the loop body,
a library function, was out of their reach.

Matches: every While of the main graph whose trip count the graph's constants fix and whose
unrolled form adds at most ``max_nodes`` nodes (the transform's default); a data-dependent loop
is no match. Finding the trip count runs the loop's static part, so the answer is remembered per
loop (its node, its cond and body, and the constants its inputs come from).
"""

from __future__ import annotations

import logging

from tfopt.optimizer.graph.functional_control_flow import WHILE_OPS, prune_unreachable_functions
from tfopt.optimizer.graph.static_loops import (
    NotStatic,
    StaticLoop,
    analyse_loop,
    loop_key,
    unroll_loop,
)
from tfopt.optimizer.graph.tensor_lists import simplify_tensor_lists
from tfopt.optimizer.search.substitution import Match, Substitution
from tfopt.optimizer.transforms.base import TransformContext
from tfopt.optimizer.transforms.unroll_static_loops import DEFAULT_MAX_NODES

log = logging.getLogger(__name__)

_MEMO_SIZE = 256


class UnrollStaticLoopsRule(Substitution):
    name = "unroll_static_loops"
    description = "a While loop with a constant trip count -> its body once per trip"

    def __init__(self, max_nodes: int = DEFAULT_MAX_NODES):
        self.max_nodes = max_nodes
        self._memo: dict[str, StaticLoop | str] = {}

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        found = []
        for node in graph_def.node:
            if node.op not in WHILE_OPS or node.name in context.boundary:
                continue
            loop = self.static_loop(graph_def, node)
            if isinstance(loop, str):
                log.debug("%s: %s is no match: %s", self.name, node.name, loop)
                continue
            found.append(Match(self.name, (node.name,),
                               {"trips": loop.trips, "added_nodes": loop.added_nodes}))
        return found

    def apply(self, graph_def, match: Match, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        result = graph_pb2.GraphDef()
        result.CopyFrom(graph_def)
        [name] = match.nodes
        node = next((n for n in result.node if n.name == name and n.op in WHILE_OPS), None)
        loop = None if node is None else self.static_loop(result, node)
        if loop is None or isinstance(loop, str):
            raise ValueError(f"{match.describe()} does not apply to this graph")
        unroll_loop(result, loop, context.boundary)
        simplify_tensor_lists(result, context.boundary)
        prune_unreachable_functions(result)
        return result

    def growth(self, graph_def, context: TransformContext) -> int:
        return sum(m.detail["added_nodes"] for m in self.matches(graph_def, context))

    def static_loop(self, graph_def, node) -> StaticLoop | str:
        """The loop's analysis, or why it is no match; remembered per loop."""
        key = loop_key(graph_def, node)
        if key not in self._memo:
            if len(self._memo) >= _MEMO_SIZE:
                self._memo.pop(next(iter(self._memo)))
            try:
                self._memo[key] = analyse_loop(graph_def, node, self.max_nodes)
            except NotStatic as reason:
                self._memo[key] = str(reason)
        return self._memo[key]
