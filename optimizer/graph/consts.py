"""Reading constants out of a GraphDef."""

from __future__ import annotations

from tfopt.optimizer.graph.names import node_name_from_input, output_index

# Ops that pass their first input through unchanged at inference time.
PASS_THROUGH_OPS = frozenset({"Identity", "IdentityN", "Snapshot", "StopGradient"})


def resolve_through_identity(nodes_by_name: dict, name: str):
    """The node behind tensor ``name`` once Identity-like wrappers are looked through.

    ``IdentityN:k`` passes its k-th input through, so the walk follows that input.
    """
    node = nodes_by_name.get(node_name_from_input(name))
    index = output_index(name)
    seen = set()
    while node is not None and node.op in PASS_THROUGH_OPS and node.name not in seen:
        seen.add(node.name)
        position = index if node.op == "IdentityN" else 0
        data_inputs = [i for i in node.input if not i.startswith("^")]
        if position >= len(data_inputs):
            return node
        index = output_index(data_inputs[position])
        node = nodes_by_name.get(node_name_from_input(data_inputs[position]))
    return node


def values_from_const(node):
    """The numpy value of a ``Const`` node."""
    from tensorflow.python.framework import tensor_util

    if node.op != "Const":
        raise ValueError(f"node {node.name} is a {node.op}, not a Const")
    return tensor_util.MakeNdarray(node.attr["value"].tensor)


def const_shape(node) -> tuple[int, ...] | None:
    if node is None or node.op != "Const":
        return None
    return tuple(d.size for d in node.attr["value"].tensor.tensor_shape.dim)
