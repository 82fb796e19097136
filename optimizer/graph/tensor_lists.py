"""TensorList ops at constant indices, written as the plain tensor ops they amount to.

A Keras RNN keeps its per-step inputs and outputs in TensorLists (TensorArrays): the sequence
goes in with ``TensorListFromTensor`` and is read one step at a time with ``TensorListGetItem``;
the outputs are written with ``TensorListSetItem`` into a ``TensorListReserve`` list and come
out with ``TensorListStack``. Inside a loop the index is the step counter; once the loop is
unrolled (:mod:`tfopt.optimizer.graph.static_loops`) it is a constant per copy, and then

- ``GetItem(FromTensor(t), k)`` is ``t[k]``: a ``StridedSlice`` with ``shrink_axis_mask`` 1;
- ``Stack(SetItem(...SetItem(Reserve(n), k0, x0)..., kj, xj))``, every index of ``0..n-1``
  written, is ``Pack`` of the last item written at each index, in index order.

Variant tensors are opaque to most of the toolchain: the LiteRT converter needs their element
shape static to lower them (it is not, with a dynamic batch), Grappler does not fuse across
them. Plain tensors have none of those limits. Each rewritten node keeps its name, so its
readers need no rewiring; the lists nothing reads any more are dropped.
"""

from __future__ import annotations

import logging

import numpy as np

from tfopt.optimizer.graph.const_eval import constant_values, is_pure
from tfopt.optimizer.graph.names import (
    canonical_input,
    is_control_input,
    node_name_from_input,
    output_index,
)
from tfopt.optimizer.graph.rewrite import make_const, remove_unread, unique_name

log = logging.getLogger(__name__)

# Ops that hand their input list on unchanged (IdentityN: its input at the read output index).
_PASS_THROUGH = frozenset({"Identity", "IdentityN"})


def _source(by_name: dict, tensor: str) -> str:
    """``tensor`` with Identity/IdentityN wrappers looked through, as ``node:index``."""
    seen = set()
    while tensor not in seen:
        seen.add(tensor)
        node = by_name.get(node_name_from_input(tensor))
        if node is None or node.op not in _PASS_THROUGH:
            break
        data = [i for i in node.input if not is_control_input(i)]
        position = output_index(tensor) if node.op == "IdentityN" else 0
        if position >= len(data):
            break
        tensor = canonical_input(data[position])
    return canonical_input(tensor)


def _int_constant(values: dict, tensor: str) -> int | None:
    value = values.get(tensor)
    if value is None or np.ndim(value) != 0 or not np.issubdtype(np.asarray(value).dtype,
                                                                 np.integer):
        return None
    return int(value)


def simplify_tensor_lists(graph_def, boundary) -> int:
    """Rewrite, in place, the TensorList reads and stacks at constant indices; returns how many
    nodes became plain tensor ops."""
    by_name = {n.name: n for n in graph_def.node}
    gets = [n for n in graph_def.node if n.op == "TensorListGetItem"]
    stacks = [n for n in graph_def.node if n.op == "TensorListStack"]
    sets = [n for n in graph_def.node if n.op == "TensorListSetItem"]
    reserves = [n for n in graph_def.node if n.op == "TensorListReserve"]
    if not gets and not stacks:
        return 0
    indices = [n.input[1] for n in gets + sets] + [n.input[1] for n in reserves]
    values = constant_values(graph_def, [canonical_input(i) for i in indices], by_name)
    taken = set(by_name)
    rewritten, leftovers = 0, []
    for node in gets:
        if node.name in boundary:
            continue
        source = by_name.get(node_name_from_input(_source(by_name, node.input[0])))
        index = _int_constant(values, canonical_input(node.input[1]))
        if source is None or source.op != "TensorListFromTensor" or index is None:
            continue
        leftovers += [node_name_from_input(i) for i in node.input]
        _as_slice(graph_def, node, source.input[0], index, taken)
        rewritten += 1
    for node in stacks:
        items = None if node.name in boundary else _stacked_items(by_name, values, node)
        if items is None:
            continue
        leftovers += [node_name_from_input(i) for i in node.input]
        _as_pack(node, items)
        rewritten += 1
    if rewritten:
        remove_unread(graph_def, leftovers, boundary, is_pure)
        log.debug("tensor lists: %d reads and stacks became slices and packs", rewritten)
    return rewritten


def _stacked_items(by_name: dict, values: dict, stack) -> list[str] | None:
    """The items a TensorListStack returns, in order, when its list is a Reserve(n) that a chain
    of SetItems writes at every index 0..n-1 (the last write to an index wins: Keras writes
    every step's output at index 0 of a one-element list when only the last one is returned);
    else None."""
    written: dict[int, str] = {}
    indices: list[int] = []
    tensor = _source(by_name, stack.input[0])
    while True:
        node = by_name.get(node_name_from_input(tensor))
        if node is None:
            return None
        if node.op == "TensorListReserve":
            size = _int_constant(values, canonical_input(node.input[1]))
            if size is None or size < 1 or sorted(written) != list(range(size)) or \
                    any(i >= size for i in indices):
                return None
            return [written[i] for i in range(size)]
        if node.op != "TensorListSetItem" or (
                "resize_if_index_out_of_bounds" in node.attr
                and node.attr["resize_if_index_out_of_bounds"].b):
            return None
        index = _int_constant(values, canonical_input(node.input[1]))
        if index is None or index < 0:
            return None
        indices.append(index)
        written.setdefault(index, canonical_input(node.input[2]))  # walking back: last write
        tensor = _source(by_name, node.input[0])


def _as_slice(graph_def, node, tensor: str, index: int, taken: set) -> None:
    """Make ``node`` (a TensorListGetItem) ``tensor[index]`` under the same name."""
    dtype = node.attr["element_dtype"].type
    consts = []
    for suffix, value in (("begin", index), ("end", index + 1), ("strides", 1)):
        const = make_const(unique_name(taken, f"{node.name}/{suffix}"),
                           np.array([value], dtype=np.int32), node.device)
        taken.add(const.name)
        consts.append(const)
    controls = [i for i in node.input if is_control_input(i)]
    name, device = node.name, node.device
    node.Clear()
    node.name, node.op, node.device = name, "StridedSlice", device
    node.input.extend([canonical_input(tensor)] + [c.name for c in consts] + controls)
    node.attr["T"].type = dtype
    node.attr["Index"].type = consts[0].attr["dtype"].type
    for mask in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask"):
        node.attr[mask].i = 0
    node.attr["shrink_axis_mask"].i = 1
    graph_def.node.extend(consts)


def _as_pack(node, items: list[str]) -> None:
    """Make ``node`` (a TensorListStack) ``Pack(items, axis=0)`` under the same name."""
    dtype = node.attr["element_dtype"].type
    controls = [i for i in node.input if is_control_input(i)]
    name, device = node.name, node.device
    node.Clear()
    node.name, node.op, node.device = name, "Pack", device
    node.input.extend(items + controls)
    node.attr["T"].type = dtype
    node.attr["N"].i = len(items)
    node.attr["axis"].i = 0
