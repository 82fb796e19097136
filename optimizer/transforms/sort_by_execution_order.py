"""sort_by_execution_order: order the nodes so that every node comes after its inputs.

GTT semantics: a topological sort over data and control edges, in which a while loop's Merge
does not wait for its NextIteration (the loop's back edge, the one input allowed to come later).
Some consumers of a GraphDef (and a human reading it) want this order; TensorFlow itself does not.

Differences from GTT, both for stable output: among nodes that are ready, the one earliest in
the input goes first (GTT takes the latest), so an already sorted graph comes back unchanged and
the order is deterministic; and a Merge waits for all its inputs except NextIteration (GTT lets
any Merge go after one input), so a cond's Merge comes after both branches. A graph where that
leaves nodes stuck falls back to GTT's rule.

Precondition: no cycles other than while loops (GTT refuses those too).
"""

from __future__ import annotations

from tfopt.optimizer.graph.control_flow import execution_order
from tfopt.optimizer.graph.validate import InvalidGraphError
from tfopt.optimizer.transforms.base import Transform, TransformContext, TransformRefused


class SortByExecutionOrder(Transform):
    name = "sort_by_execution_order"

    def transform(self, graph_def, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        try:
            order = execution_order(graph_def)
        except InvalidGraphError as exc:
            raise TransformRefused(f"sort_by_execution_order: {exc}") from None
        result = graph_pb2.GraphDef()
        result.CopyFrom(graph_def)
        del result.node[:]
        result.node.extend(graph_def.node[i] for i in order)
        return result
