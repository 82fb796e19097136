"""Editing a GraphDef for a pattern rewrite: who reads a node, new constants, dropping leftovers.

A rewrite replaces a chain of nodes by fewer nodes that keep the names consumers read. These
helpers cover the steps every such rewrite repeats: checking that a node's value is read by one
node only (otherwise the unfused value is still needed), writing a folded constant, removing
the constant subgraphs that nothing reads any more, and copying out a graph of some nodes only.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence

import numpy as np

from tfopt.optimizer.graph.consts import PASS_THROUGH_OPS
from tfopt.optimizer.graph.names import is_control_input, node_name_from_input


def graph_with_only(graph_def, names: Container[str], *, library: bool = True):
    """A fresh GraphDef of copies of the nodes of ``graph_def`` named in ``names``, in graph
    order, with its versions and (``library``) its functions. ``graph_def`` is left as it was:
    callers edit the copies (clear a device, declare a shape) in the result."""
    from tensorflow.core.framework import graph_pb2

    result = graph_pb2.GraphDef()
    result.versions.CopyFrom(graph_def.versions)
    if library:
        result.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name in names:
            result.node.add().CopyFrom(node)
    return result


def only_reader(readers: dict[str, list], name: str):
    """The one node reading ``name``, if it reads it through a single data edge and no other
    node reads it at all (data or control); else None."""
    nodes = readers.get(name, [])
    if len(nodes) != 1:
        return None
    reader = nodes[0]
    edges = [i for i in reader.input if node_name_from_input(i) == name]
    return reader if len(edges) == 1 and not is_control_input(edges[0]) else None


def unique_name(taken, base: str) -> str:
    """``base``, or ``base_1``, ``base_2``... whichever is not in ``taken`` yet."""
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def make_const(name: str, value: np.ndarray, device: str = ""):
    from tensorflow.core.framework import node_def_pb2
    from tensorflow.python.framework import dtypes, tensor_util

    node = node_def_pb2.NodeDef(name=name, op="Const", device=device)
    node.attr["dtype"].type = dtypes.as_dtype(value.dtype).as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(value))
    return node


# DataType enums (tensorflow/core/framework/types.proto) the rewrites write and test for.
DT_INT32 = 3
FLOAT_TYPES = frozenset({1, 14, 19})  # DT_FLOAT, DT_BFLOAT16, DT_HALF


def attr_value(**value):
    """An ``AttrValue`` of ``value`` (``type=``, ``i=``, ``b=``, ``s=``...), for a new node's
    ``attrs``."""
    from tensorflow.core.framework import attr_value_pb2

    return attr_value_pb2.AttrValue(**value)


def add_node(graph_def, nodes_by_name: dict, op: str, base: str, inputs: Sequence[str] = (),
             device: str = "", attrs: dict | None = None, value: np.ndarray | None = None):
    """Append a node named ``base`` (made unique) to ``graph_def`` and ``nodes_by_name``: a
    ``Const`` of ``value`` when given, else ``op`` reading ``inputs`` with ``attrs``
    (name -> AttrValue). Returns the node."""
    node = graph_def.node.add()
    if value is not None:
        node.CopyFrom(make_const(unique_name(nodes_by_name, base), value, device))
    else:
        node.name, node.op, node.device = unique_name(nodes_by_name, base), op, device
        node.input.extend(inputs)
        for key, attr in (attrs or {}).items():
            node.attr[key].CopyFrom(attr)
    nodes_by_name[node.name] = node
    return node


def replace_node(node, op: str, inputs: Sequence[str], attrs: dict) -> None:
    """``node`` cleared and made ``op`` of ``inputs`` and ``attrs`` (name -> AttrValue), keeping
    its name and device, so that its readers read the replacement."""
    name, device = node.name, node.device
    node.Clear()
    node.name, node.op, node.device = name, op, device
    node.input.extend(inputs)
    for key, attr in attrs.items():
        node.attr[key].CopyFrom(attr)


def exclusive_const(nodes_by_name: dict, readers: dict[str, list], tensor: str,
                    keep: Iterable[str] = ()):
    """The ``Const`` behind ``tensor`` (through Identity wrappers) when the path to it is read by
    nothing else and is not in ``keep`` (nodes read from outside by name), so that overwriting
    its value changes only this one use; else None."""
    keep = set(keep)
    name = node_name_from_input(tensor)
    while True:
        node = nodes_by_name.get(name)
        if name in keep:
            return None
        data_readers = [r for r in readers.get(name, [])
                        if any(node_name_from_input(i) == name and not is_control_input(i)
                               for i in r.input)]
        if node is None or len(data_readers) != 1:
            return None
        if node.op == "Const":
            return node
        # IdentityN forwards input i to output i; following input 0 would find the wrong Const.
        if node.op not in PASS_THROUGH_OPS or node.op == "IdentityN" or not node.input:
            return None
        name = node_name_from_input(node.input[0])


def write_const_input(graph_def, nodes_by_name: dict, readers: dict[str, list], node,
                      index: int, value: np.ndarray, new_name: str,
                      keep: Iterable[str] = ()) -> None:
    """Make ``node.input[index]`` read ``value``: in place when that constant is used only
    there (so the graph does not keep both copies), else through a new ``Const``."""
    replacement = make_const(unique_name(nodes_by_name, new_name), value, node.device)
    const = exclusive_const(nodes_by_name, readers, node.input[index], keep)
    if const is not None and const.attr["dtype"].type == replacement.attr["dtype"].type:
        const.attr["value"].CopyFrom(replacement.attr["value"])
        return
    created = graph_def.node.add()
    created.CopyFrom(replacement)
    name = created.name
    nodes_by_name[name] = created
    node.input[index] = name


def control_inputs(*nodes) -> list[str]:
    """The control inputs of ``nodes``, each once, in order."""
    return list(dict.fromkeys(i for n in nodes for i in n.input if is_control_input(i)))


def drop_nodes(graph_def, names: Container[str]) -> None:
    """Remove the nodes called ``names`` from ``graph_def``, in place, keeping the others'
    order."""
    kept = [n for n in graph_def.node if n.name not in names]
    del graph_def.node[:]
    graph_def.node.extend(kept)


def remove_unread(graph_def, candidates: Iterable[str], keep: Iterable[str], removable) -> int:
    """Drop ``candidates`` nothing reads any more, then their inputs that became unread, as long
    as ``removable(node)`` allows it and the node is not in ``keep``. Returns how many went."""
    keep = set(keep)
    by_name = {n.name: n for n in graph_def.node}
    read_by: dict[str, int] = {}
    for node in graph_def.node:
        for inp in node.input:
            source = node_name_from_input(inp)
            read_by[source] = read_by.get(source, 0) + 1
    removed: set[str] = set()
    todo = list(candidates)
    while todo:
        name = todo.pop()
        node = by_name.get(name)
        if (node is None or name in removed or name in keep or read_by.get(name, 0)
                or not removable(node)):
            continue
        removed.add(name)
        for inp in node.input:
            source = node_name_from_input(inp)
            read_by[source] -= 1
            todo.append(source)
    if removed:
        drop_nodes(graph_def, removed)
    return len(removed)


def fold_each(graph_def, patterns: Sequence, fold: Callable[[object, list[str]], bool],
              keep: Iterable[str], removable) -> list:
    """Fold every matched pattern in place and drop what the folds made dead.

    ``fold(pattern, leftovers)`` rewrites one pattern, appends the names of nodes that may have
    become unread to ``leftovers``, and returns whether it folded; a folded pattern's
    ``removed`` nodes are then dropped together, and the leftovers nobody reads any more go too
    (see :func:`remove_unread`). Returns the patterns that were folded.
    """
    leftovers: list[str] = []
    removed: set[str] = set()
    folded = []
    for pattern in patterns:
        if fold(pattern, leftovers):
            removed.update(n.name for n in pattern.removed)
            folded.append(pattern)
    if removed:
        drop_nodes(graph_def, removed)
    remove_unread(graph_def, leftovers, keep, removable)
    return folded
