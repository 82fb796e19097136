"""Values of tensors that depend on constants only, computed by running that part of the graph.

A frozen graph often computes a weight from constants instead of storing it: Keras exports a
BatchNorm scale as ``Rsqrt(var + eps) * gamma`` and a bias as ``Squeeze(Reshape(b))``. A rewrite
that needs such a value evaluates the constant-only subgraph behind it, once, in a private
session; control edges do not change a stateless op's value, so they are dropped for evaluation.
"""

from __future__ import annotations

import numpy as np

from tfopt.optimizer.graph.consts import resolve_through_identity, values_from_const
from tfopt.optimizer.graph.names import is_control_input, node_name_from_input, output_index
from tfopt.optimizer.graph.rewrite import graph_with_only

# Ops whose output can differ between runs, or that need a frame, a feed or a function library,
# even when every input is constant.
_NEVER_CONSTANT = frozenset({
    "Placeholder", "PlaceholderV2", "PlaceholderWithDefault",
    "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch", "Merge", "RefMerge",
    "NextIteration", "RefNextIteration", "LoopCond", "ControlTrigger",
    "PartitionedCall", "StatefulPartitionedCall", "If", "While", "StatelessIf", "StatelessWhile",
    "Case", "StatelessCase",
})


# Single-input ops that return their input unchanged: a chain of them ending in one Const has
# that Const's value, read without running anything.
_FORWARDING = frozenset({"Identity", "Snapshot", "StopGradient"})


def is_pure(node) -> bool:
    """True when ``node``'s output depends only on its data inputs: no state, feed or frame."""
    from tensorflow.python.framework import op_def_registry

    if node.op == "Const":
        return True
    op_def = op_def_registry.get(node.op)
    return node.op not in _NEVER_CONSTANT and op_def is not None and not op_def.is_stateful


def constant_subgraph(nodes_by_name: dict, tensor: str,
                      memo: dict[str, bool] | None = None) -> set[str] | None:
    """Names of the nodes ``tensor``'s value is computed from, or None if any is not constant.

    ``memo`` (node name -> is constant) may be shared between calls on the same graph, so that
    asking about many tensors does not walk the same non-constant ancestry again and again.
    """
    memo = {} if memo is None else memo
    root = node_name_from_input(tensor)
    # Iterative post-order walk: frozen graphs can be deep enough to hit Python's recursion limit.
    stack = [(root, False)]
    on_path: set[str] = set()
    while stack:
        name, expanded = stack.pop()
        if name in memo and not expanded:
            continue
        node = nodes_by_name.get(name)
        if node is None:
            memo[name] = False
            continue
        data_inputs = [node_name_from_input(i) for i in node.input if not is_control_input(i)]
        if expanded:
            on_path.discard(name)
            memo[name] = all(memo.get(i, False) for i in data_inputs)
            continue
        if node.op == "Const":
            memo[name] = True
            continue
        if not data_inputs or not is_pure(node) or name in on_path:
            memo[name] = False
            continue
        on_path.add(name)
        stack.append((name, True))
        stack.extend((i, False) for i in data_inputs if i not in memo)
    if not memo.get(root, False):
        return None
    needed, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(node_name_from_input(i) for i in nodes_by_name[name].input
                        if not is_control_input(i))
    return needed


def constant_values(graph_def, tensors, nodes_by_name: dict | None = None) -> dict[str, np.ndarray]:
    """``tensor -> value`` for each of ``tensors`` that depends on constants only.

    Tensors behind a ``Const`` (possibly wrapped in Identity nodes) are read directly; the rest
    are computed together in one session run. Tensors that are not constant are left out.
    """
    by_name = nodes_by_name if nodes_by_name is not None else {n.name: n for n in graph_def.node}
    values: dict[str, np.ndarray] = {}
    to_run: dict[str, set[str]] = {}
    memo: dict[str, bool] = {}
    for tensor in dict.fromkeys(tensors):
        subgraph = constant_subgraph(by_name, tensor, memo)
        if subgraph is None:
            continue
        ops = [by_name[name].op for name in subgraph]
        if ops.count("Const") == 1 and all(op in _FORWARDING for op in ops if op != "Const"):
            values[tensor] = values_from_const(resolve_through_identity(by_name, tensor))
        else:
            to_run[tensor] = subgraph
    if not to_run:
        return values

    needed = set().union(*to_run.values())
    evaluation = graph_with_only(graph_def, needed, library=False)
    for copy in evaluation.node:
        copy.device = ""
        kept = [i for i in copy.input if not is_control_input(i)]
        del copy.input[:]
        copy.input.extend(kept)
    values.update(zip(to_run, _run(evaluation, list(to_run))))
    return values


def _run(graph_def, tensors: list[str]) -> list[np.ndarray]:
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    fetches = [f"{node_name_from_input(t)}:{output_index(t)}" for t in tensors]
    with tf.compat.v1.Session(graph=graph) as session:
        return session.run(fetches)
