"""Ops that read one tensor side by side with constant weights: finding them, merging them.

Several Conv2Ds (or MatMuls) reading the same tensor with identical attributes each compute a
slice of the output channels of one bigger op. Concatenating their constant weights along the
output-channel axis gives that op; a SplitV along the channel axis hands every original consumer
its slice back. The original names survive as Identity nodes of the split's outputs, so nothing
downstream is rewired. Used by merge_parallel_convs, merge_parallel_matmuls and (for the sibling
lookup) enlarge_conv_kernel.
"""

from __future__ import annotations

import numpy as np

from tfopt.optimizer.graph.const_eval import constant_subgraph, constant_values, is_pure
from tfopt.optimizer.graph.consts import const_shape, resolve_through_identity, values_from_const
from tfopt.optimizer.graph.control_flow import nodes_under_control_flow
from tfopt.optimizer.graph.names import canonical_input, is_control_input, node_name_from_input
from tfopt.optimizer.graph.rewrite import (
    control_inputs,
    make_const,
    only_reader,
    remove_unread,
    unique_name,
)
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.search.substitution import Match

# Attributes that must agree for two convolutions to be slices of one (besides the kernel size).
CONV_ATTRS = ("T", "strides", "padding", "explicit_paddings", "dilations", "data_format")


def data_inputs(node) -> list[str]:
    return [i for i in node.input if not is_control_input(i)]


def attrs_key(node, names) -> tuple:
    """The listed attrs of ``node`` as comparable bytes (a missing attr compares as empty)."""
    return tuple(node.attr[n].SerializeToString(deterministic=True) if n in node.attr else b""
                 for n in names)


def int_list(node, attr: str) -> tuple[int, ...]:
    return tuple(node.attr[attr].list.i) if attr in node.attr else ()


def data_format(node) -> bytes:
    return node.attr["data_format"].s if "data_format" in node.attr else b"NHWC"


def const_weights(by_name: dict, tensor: str) -> np.ndarray | None:
    """The value behind ``tensor`` when it is a Const (through Identity wrappers), else None."""
    node = resolve_through_identity(by_name, tensor)
    if node is None or node.op != "Const":
        return None
    return values_from_const(node)


def const_weights_shape(by_name: dict, tensor: str) -> tuple[int, ...] | None:
    """The shape of the Const behind ``tensor`` (through Identity wrappers), without reading its
    value (matching runs often; filters can be megabytes); None when it is not a Const."""
    return const_shape(resolve_through_identity(by_name, tensor))


def siblings_by_input(graph_def, op: str) -> dict[str, list]:
    """Input tensor -> the ``op`` nodes reading it as their first input, in graph order.

    Nodes inside a while frame or a cond branch are left out: the Consts a rewrite adds have no
    inputs, so they would sit in the root frame, and TF refuses an op with inputs from two frames.
    """
    under_control_flow = nodes_under_control_flow(graph_def)
    groups: dict[str, list] = {}
    for node in graph_def.node:
        inputs = data_inputs(node)
        if node.op == op and len(inputs) >= 2 and node.name not in under_control_flow:
            groups.setdefault(canonical_input(inputs[0]), []).append(node)
    return groups


def mergeable_groups(graph_def, op: str, key_of) -> list[list]:
    """Sibling ``op`` nodes (see :func:`siblings_by_input`) that can be merged: grouped by
    ``key_of(node, weights_shape)`` (None: the node cannot be merged), two or more per group, in
    graph order. ``weights_shape`` is the shape of the node's constant second input, or None."""
    by_name = nodes_by_name(graph_def)
    groups = []
    for siblings in siblings_by_input(graph_def, op).values():
        by_key: dict[tuple, list] = {}
        for node in siblings:
            key = key_of(node, const_weights_shape(by_name, data_inputs(node)[1]))
            if key is not None:
                by_key.setdefault(key, []).append(node)
        groups += [g for g in by_key.values() if len(g) >= 2]
    return groups


def group_matches(rule: str, graph_def, groups, boundary) -> list[Match]:
    """One match per group, noting whether every member's BiasAdd merges along with it."""
    return [Match(rule, tuple(n.name for n in group),
                  {"with_bias": bias_readers(graph_def, group, boundary) is not None})
            for group in groups]


def bias_readers(graph_def, members, boundary) -> list | None:
    """For each member, the BiasAdd with a constant bias that is its only reader; None unless
    every member has one (then the members themselves can go, their BiasAdds keep the names).
    The bias may be computed from constants only (Keras 3 exports ``Squeeze(Reshape(b))``)."""
    readers = consumers(graph_def)
    by_name = nodes_by_name(graph_def)
    memo: dict[str, bool] = {}
    found = []
    for member in members:
        reader = only_reader(readers, member.name)
        if (member.name in boundary or reader is None or reader.op != "BiasAdd"
                or canonical_input(data_inputs(reader)[0]) != member.name
                or constant_subgraph(by_name, data_inputs(reader)[1], memo) is None):
            return None
        # A BiasAdd adds along its own data_format's channel axis, which must be the conv's.
        if "data_format" in member.attr and data_format(reader) != data_format(member):
            return None
        found.append(reader)
    formats = {data_format(r) for r in found}
    return found if len(formats) == 1 else None


def merge_parallel(graph_def, members: list[str], weight_axis: int, split_axis: int,
                   boundary, with_bias: bool):
    """A new GraphDef where ``members`` (same input, same attrs, constant weights as input 1)
    are one op with concatenated weights, followed by a SplitV along ``split_axis``.

    The merged op is ``<first>_merged``; with ``with_bias`` the members' BiasAdds (found by
    :func:`bias_readers`) become one ``<first>_merged_bias`` too and the members are dropped.
    Each original output name becomes an Identity of its slice of ``<first>_merged_split``.
    """
    from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2

    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    by_name = nodes_by_name(out)
    nodes = [by_name[m] for m in members]
    first = nodes[0]
    weights = [const_weights(by_name, data_inputs(n)[1]) for n in nodes]
    old_consts = [data_inputs(n)[1] for n in nodes]
    taken = set(by_name)

    def fresh(base: str) -> str:
        name = unique_name(taken, base)
        taken.add(name)
        return name

    merged_name = fresh(f"{first.name}_merged")
    weight_const = make_const(fresh(f"{merged_name}/weights"),
                              np.concatenate(weights, axis=weight_axis), first.device)
    merged = node_def_pb2.NodeDef()
    merged.CopyFrom(first)
    merged.name = merged_name
    del merged.input[:]
    merged.input.extend([data_inputs(first)[0], weight_const.name] + control_inputs(*nodes))
    added = [weight_const, merged]
    split_source, outputs = merged_name, nodes
    if with_bias:
        biases = bias_readers(out, nodes, boundary)
        bias_tensors = [data_inputs(b)[1] for b in biases]
        old_consts += bias_tensors
        values = constant_values(out, bias_tensors, by_name)
        bias_const = make_const(
            fresh(f"{merged_name}/bias"),
            np.concatenate([values[t].reshape(-1) for t in bias_tensors]), biases[0].device)
        merged_bias = node_def_pb2.NodeDef()
        merged_bias.CopyFrom(biases[0])
        merged_bias.name = fresh(f"{first.name}_merged_bias")
        del merged_bias.input[:]
        merged_bias.input.extend([merged_name, bias_const.name] + control_inputs(*biases))
        added += [bias_const, merged_bias]
        split_source, outputs = merged_bias.name, biases
    split_name = fresh(f"{first.name}_merged_split")
    sizes = make_const(fresh(f"{split_name}/size_splits"),
                       np.array([w.shape[weight_axis] for w in weights], dtype=np.int32),
                       first.device)
    axis = make_const(fresh(f"{split_name}/split_dim"), np.array(split_axis, dtype=np.int32),
                      first.device)
    split = node_def_pb2.NodeDef(name=split_name, op="SplitV", device=first.device,
                                 input=[split_source, sizes.name, axis.name])
    split.attr["T"].CopyFrom(first.attr["T"])
    split.attr["Tlen"].type = types_pb2.DT_INT32
    split.attr["num_split"].i = len(nodes)
    added += [sizes, axis, split]
    for index, node in enumerate(outputs):
        name, device, dtype = node.name, node.device, node.attr["T"].type
        node.Clear()
        node.name, node.op, node.device = name, "Identity", device
        node.input.append(f"{split_name}:{index}" if index else split_name)
        node.attr["T"].type = dtype
    if with_bias:
        dropped = set(members)
        kept = [n for n in out.node if n.name not in dropped]
        del out.node[:]
        out.node.extend(kept)
    out.node.extend(added)
    remove_unread(out, [node_name_from_input(c) for c in old_consts], boundary,
                  is_pure)
    return out
