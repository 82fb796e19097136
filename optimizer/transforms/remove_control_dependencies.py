"""remove_control_dependencies: drop control inputs (``^node``) that only order execution.

GTT semantics: every ``^x`` input is removed, so asserts, prints and the NoOps that tie a
function's reads together no longer hold back (or keep alive) the nodes that waited on them.
This is opt-in: it changes behaviour when a control edge guarded something on purpose (an
Assert no longer runs before the value it checks).

Unlike GTT, control edges that lowered control flow needs are kept: any control input of a
node that runs inside a while frame or a cond branch, and any control input from such a node or
from a control-flow op. A Const inside a branch reads ``^pivot`` to become part of the branch
(without it, it would run whichever way the cond goes, and its Merge would see two values); a
Const inside a loop body reads a control input to get its frame.

Precondition: none beyond a valid graph. Nodes left without consumers stay; follow with
``strip_unused_nodes`` to drop them.
"""

from __future__ import annotations

import logging

from tfopt.optimizer.graph.control_flow import nodes_under_control_flow
from tfopt.optimizer.graph.names import is_control_input, node_name_from_input
from tfopt.optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)


class RemoveControlDependencies(Transform):
    name = "remove_control_dependencies"

    def transform(self, graph_def, context: TransformContext):
        scoped = nodes_under_control_flow(graph_def)
        kept = 0
        for node in graph_def.node:
            inputs = list(node.input)
            remaining = [i for i in inputs if not is_control_input(i) or node.name in scoped
                         or node_name_from_input(i) in scoped]
            kept += sum(1 for i in remaining if is_control_input(i))
            if remaining != inputs:
                del node.input[:]
                node.input.extend(remaining)
        if kept:
            log.debug("remove_control_dependencies: kept %d control inputs that control flow "
                      "needs", kept)
        return graph_def
