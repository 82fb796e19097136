"""A folded lookup whose only use is to index a constant (an embedding), folded into that
constant: one gather of precomputed rows instead of the table's value gather, the index fix-ups
after it, and the embedding's gather.

A Keras ``StringLookup`` (or ``IntegerLookup``) feeding an ``Embedding`` freezes to the folded
search of :mod:`tfopt.optimizer.graph.lookup_tables` (the sorted position of each token, ``position``,
and whether the key there is the token, ``hit``), then
``SelectV2(hit, GatherV2(values, position), default)``, then the ``Embedding``'s handling of
negative ids (``Less``, ``AddV2``, ``SelectV2``), then ``GatherV2(embedding, ids)``. Everything
between ``position`` and the embedding's gather maps one table position (or the miss) to one
embedding row, elementwise, through constants: it is a constant function of the position. So
it is computed once, at freeze time, for every position and for the miss, and the embedding's
rows are gathered in that order into a new constant of ``len(values) + 1`` rows (the values
have one entry past the table's, for the search's sentinel position):

    rows = embedding[f(concat(values, [default]))]
    GatherV2(embedding, ids)  ->  GatherV2(rows, SelectV2(hit, position, len(values)))

The gather keeps its name, and the ``SelectV2`` takes the find's, so nothing downstream is
rewired. The result is exact: the same rows are gathered, copied bit for bit. At batch 1 such
a model is a handful of small ops, each paying the executor's per-op cost, so five ops fewer
(value gather, Identity, Less, AddV2, SelectV2; and the constant subgraph that computed the
embedding's size) is what counts: on the StringLookup classifier of
``benchmarks/string_lookup.py`` (10000 keys, 16 tokens), called with flat inputs in one
process on a loaded machine, the optimized graph went from 1.43x to 1.58x the stock call.

Folded only where it is safe and does not grow the model: every op between the find and the
gather is elementwise (:data:`ELEMENTWISE_OPS`) with its other inputs scalar constants, nothing
else reads them, none is a signature output, and the embedding has no other reader (its rows are
then replaced, not copied: ``len(table) + 2`` rows for its ``vocabulary + 1``). An index out of
the embedding's range is left to fail at run time as before: the pattern is left alone.

The same region after a table that is kept (the SavedModel the LiteRT converter reads,
:mod:`tfopt.optimizer.candidates.litert.constant_tables`) folds into the table instead
(:func:`fold_index_map_into_table`): the table's values and the find's default become the
indices the gathers would have computed from them, and the gathers read the find. LiteRT then
runs ``HASHTABLE_FIND``, ``GATHER`` instead of ``HASHTABLE_FIND``, ``LESS``, ``ADD``,
``SELECT_V2``, ``GATHER``, with the embedding unchanged, and the result is exact for the same
reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.graph.const_eval import constant_subgraph, constant_values
from tfopt.optimizer.graph.consts import PASS_THROUGH_OPS, values_from_const
from tfopt.optimizer.graph.lookup_tables import FIND_OP, SCOPE, rebuilt_graph
from tfopt.optimizer.graph.names import is_control_input, node_name_from_input, output_index
from tfopt.optimizer.graph.rewrite import make_const

log = logging.getLogger(__name__)

# Ops that map an index elementwise when their other inputs are scalars: the Keras Embedding's
# negative-id fix (Less, AddV2, SelectV2), casts, offsets and clips.
ELEMENTWISE_OPS = frozenset({
    "Identity", "Cast", "Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual",
    "Add", "AddV2", "Sub", "Mul", "Maximum", "Minimum", "FloorMod", "FloorDiv", "Neg", "Abs",
    "SelectV2", "LogicalAnd", "LogicalOr", "LogicalNot", "ClipByValue"})
MISS_ROW = "miss_row"
_INT32 = 3  # DataType enum (types.proto): the folded search's positions
_INDEX_TYPES = frozenset({_INT32, 9})  # int32, int64: what a gather takes as indices
ROWS = "folded_rows"


def _const_behind(nodes, name: str):
    node = nodes.get(node_name_from_input(name))
    while node is not None and node.op in PASS_THROUGH_OPS and node.op != "IdentityN":
        node = nodes.get(node_name_from_input(node.input[0]))
    return node if node is not None and node.op == "Const" else None


def _chain_behind(nodes, name: str) -> list[str]:
    """The Identity nodes between tensor ``name`` and the Const behind it, and the Const."""
    chain, node = [], nodes.get(node_name_from_input(name))
    while node is not None:
        chain.append(node.name)
        if node.op == "Const":
            return chain
        node = nodes.get(node_name_from_input(node.input[0]))
    return []


class _Region:
    """The ops between one folded find and the constant gathers it indexes."""

    def __init__(self, find, nodes, readers, protected):
        self.find, self.nodes, self.readers = find, nodes, readers
        self.protected = protected
        self.inner: dict[str, object] = {}  # elementwise ops, by name
        self.gathers: dict[str, object] = {}

    def _members(self) -> set[str]:
        return {self.find.name, *self.inner}

    def _gathers_a_constant(self, node, edge: str) -> bool:
        if node.op != "GatherV2" or node.attr["batch_dims"].i != 0 or len(node.input) < 3:
            return False
        params, indices, axis = node.input[:3]
        axis_const = _const_behind(self.nodes, axis)
        return (edge == indices and node_name_from_input(params) not in self._members()
                and axis_const is not None and int(values_from_const(axis_const)) == 0
                and _const_behind(self.nodes, params) is not None)

    def outside_inputs(self) -> list[str]:
        """The inner ops' data inputs from outside the region."""
        members = self._members()
        return [i for n in self.inner.values() for i in n.input
                if not is_control_input(i) and node_name_from_input(i) not in members]

    def grow(self) -> bool:
        """Collect the region; False when anything reads it that the fold cannot take."""
        pending = [self.find]
        while pending:
            node = pending.pop()
            if node.name in self.protected:
                return False
            for reader in self.readers.get(node.name, []):
                if reader.name in self.inner or reader.name in self.gathers:
                    continue
                edges = [i for i in reader.input if node_name_from_input(i) == node.name]
                if all(is_control_input(e) for e in edges):
                    continue  # ordering only: a pure op orders nothing, the edge is dropped
                if len(edges) == 1 and self._gathers_a_constant(reader, edges[0]):
                    self.gathers[reader.name] = reader
                elif reader.op in ELEMENTWISE_OPS:
                    self.inner[reader.name] = reader
                    pending.append(reader)
                else:
                    return False
        return bool(self.gathers)


def _indices_for(region: _Region, graph_def,
                 position_values: np.ndarray) -> tuple[dict[str, np.ndarray], set[str]] | None:
    """Each gather's index for every table position and the miss, computed by TensorFlow,
    and the nodes the region's outside inputs are computed from; None when one of those is not
    a scalar constant (the map would then not be elementwise, or not constant)."""
    from tensorflow.core.framework import graph_pb2

    outside = sorted(set(region.outside_inputs()))
    values = constant_values(graph_def, outside, region.nodes)
    if len(values) != len(outside) or any(np.ndim(v) != 0 for v in values.values()):
        return None
    ancestors: set[str] = set()
    for tensor in outside:
        ancestors |= constant_subgraph(region.nodes, tensor) or set()
    # The region alone, the find and its outside inputs as constants: all of it is constant.
    small = graph_pb2.GraphDef()
    small.versions.CopyFrom(graph_def.versions)
    small.node.append(make_const(region.find.name, position_values))
    for tensor, value in values.items():
        if output_index(tensor) != 0:
            return None
        small.node.append(make_const(node_name_from_input(tensor), np.asarray(value)))
    small.node.extend(region.inner.values())  # constant_values drops their control edges
    indices = [g.input[1] for g in region.gathers.values()]
    computed = constant_values(small, indices)
    if len(computed) != len(set(indices)):
        return None
    return ({g.name: np.asarray(computed[g.input[1]]).reshape(-1)
             for g in region.gathers.values()}, ancestors)


def _in_range(index: np.ndarray, rows: int) -> bool:
    return not index.size or (index.min() >= 0 and index.max() < rows)


def _fold_one(region: _Region, graph_def, device: str):
    """(replacement nodes by name, names to drop) for one region, or None to leave it."""
    from tensorflow.core.framework import node_def_pb2

    nodes = region.nodes
    hit, found_value, default = (i for i in region.find.input if not is_control_input(i))
    value_gather = nodes.get(node_name_from_input(found_value))
    default_const = _const_behind(nodes, default)
    if value_gather is None or value_gather.op != "GatherV2" or default_const is None:
        return None
    values_const = _const_behind(nodes, value_gather.input[0])
    position = value_gather.input[1]
    if values_const is None or len(region.readers.get(value_gather.name, [])) != 1:
        return None
    values = values_from_const(values_const).reshape(-1)
    position_values = np.concatenate([values, values_from_const(default_const).reshape(1)])
    evaluated = _indices_for(region, graph_def, position_values.astype(values.dtype))
    if evaluated is None:
        return None
    indices, ancestors = evaluated
    scope = f"{region.find.name}/{SCOPE}"
    miss = len(values)
    row = node_def_pb2.NodeDef(name=region.find.name, op="SelectV2", device=device,
                               input=[hit, position, f"{scope}/{MISS_ROW}"])
    row.attr["T"].type = _INT32
    replaced = {region.find.name: [
        make_const(f"{scope}/{MISS_ROW}", np.array(miss, np.int32), device), row]}
    dropped = {value_gather.name, *region.inner}
    unused = set(ancestors)
    for gather in region.gathers.values():
        params = gather.input[0]
        chain = _chain_behind(nodes, params)
        allowed = {gather.name, *ancestors, *chain}
        if any(r.name not in allowed for name in chain for r in region.readers.get(name, [])
               if any(i == name or i.startswith(f"{name}:") for i in r.input)):
            return None  # the embedding is read elsewhere: folding would copy it
        embedding = values_from_const(nodes[chain[-1]])
        index = indices[gather.name]
        if not _in_range(index, embedding.shape[0]):
            return None
        rows = make_const(f"{gather.name}/{ROWS}", np.take(embedding, index, axis=0), device)
        new = type(gather)()
        new.CopyFrom(gather)
        new.input[0] = rows.name
        new.input[1] = region.find.name
        new.attr["Tindices"].type = _INT32
        replaced[gather.name] = [rows, new]
        unused.update(chain)
    unused.update(_chain_behind(nodes, value_gather.input[0]))
    return replaced, dropped, unused


def _unread(graph_def, candidates: set[str], protected: frozenset[str]) -> set[str]:
    """The ``candidates`` no data edge reads any more, once each such one is gone
    (transitively); an ordering edge on one goes with it: they are pure ops."""
    readers: dict[str, set[str]] = {}
    for node in graph_def.node:
        for inp in node.input:
            if not is_control_input(inp):
                readers.setdefault(node_name_from_input(inp), set()).add(node.name)
    gone: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name in candidates - gone - protected:
            if not readers.get(name, set()) - gone:
                gone.add(name)
                changed = True
    return gone


def _readers_of(graph_def) -> dict[str, list]:
    readers: dict[str, list] = {}
    for node in graph_def.node:
        for inp in node.input:
            readers.setdefault(node_name_from_input(inp), []).append(node)
    return readers


def fold_lookups_into_gathers(graph_def, finds: Iterable[str], protected: Iterable[str] = ()):
    """A copy of ``graph_def`` with each folded find in ``finds`` (node names) whose result only
    indexes constants folded into them; the graph itself when none is."""
    nodes = {n.name: n for n in graph_def.node}
    readers = _readers_of(graph_def)
    protected = frozenset(node_name_from_input(p) for p in protected)
    replaced: dict[str, list] = {}
    dropped: set[str] = set()
    unused: set[str] = set()  # gone when nothing reads them after the fold
    for name in finds:
        find = nodes.get(name)
        if find is None or find.op != "SelectV2" or f"{name}/{SCOPE}/anchor" in nodes:
            continue  # not folded, or in a loop frame or cond branch (its constants anchored)
        region = _Region(find, nodes, readers, protected)
        folded = _fold_one(region, graph_def, find.device) if region.grow() else None
        if folded is None:
            log.debug("lookup %s: its result is not only an index into a constant; kept", name)
            continue
        replaced.update(folded[0])
        dropped |= folded[1]
        unused |= folded[2]
        log.info("freeze: lookup %s folded into %d gather(s) of precomputed rows (%d ops "
                 "fewer)", name, len(region.gathers), len(region.inner) + 1)
    if not replaced:
        return graph_def
    # ordering edges on the folded ops go with them: they are pure ops
    result = rebuilt_graph(graph_def, replaced, dropped)
    return rebuilt_graph(result, {}, _unread(result, unused, protected))


@dataclass(frozen=True)
class FoldedTable:
    """A kept table's lookup with the index map after it folded in: the graph, and the values
    its table must now hold, in the order of the values it held, of its value type."""

    graph_def: object
    values: np.ndarray


def fold_index_map_into_table(graph_def, find_name: str, values: np.ndarray,
                              protected: Iterable[str] = ()) -> FoldedTable | None:
    """For the ``LookupTableFindV2`` node ``find_name`` of a table holding ``values``: when its
    result only indexes constants through elementwise ops with scalar constants (the region of
    :func:`fold_lookups_into_gathers`), every gather taking the same index, the graph with those
    ops gone, the gathers reading the find, the find's default replaced by its index, and the
    values the table must hold instead. None when the pattern is not there, an index would
    fall outside its constant, or the table's values are not integers a gather takes."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    nodes = {n.name: n for n in graph_def.node}
    find = nodes.get(find_name)
    if find is None or find.op != FIND_OP or len(find.input) < 3:
        return None
    default_const = _const_behind(nodes, find.input[2])
    protected = frozenset(node_name_from_input(p) for p in protected)
    region = _Region(find, nodes, _readers_of(graph_def), protected)
    if default_const is None or not region.grow() or not region.inner:
        return None
    values = np.asarray(values).reshape(-1)
    default = values_from_const(default_const).reshape(1).astype(values.dtype)
    evaluated = _indices_for(region, graph_def, np.concatenate([values, default]))
    if evaluated is None:
        return None
    indices, ancestors = evaluated
    index = next(iter(indices.values()))
    if any(not np.array_equal(i, index) for i in indices.values()):
        return None  # the gathers index differently: one table cannot hold both
    for gather in region.gathers.values():
        params = values_from_const(_const_behind(nodes, gather.input[0]))
        if not _in_range(index, params.shape[0]):
            return None
    # The table keeps its value type (LiteRT's HASHTABLE takes few; the indices are in range,
    # so they fit) and the gathers read it.
    index_type = find.attr["Tout"].type
    if index_type not in _INDEX_TYPES:
        return None
    index = index.astype(import_tensorflow().as_dtype(index_type).as_numpy_dtype)
    scope = f"{find.name}/{SCOPE}"
    new_default = make_const(f"{scope}/default", index[-1], find.device)
    new_find = type(find)()
    new_find.CopyFrom(find)
    new_find.input[2] = new_default.name
    replaced = {find.name: [new_default, new_find]}
    for gather in region.gathers.values():
        new = type(gather)()
        new.CopyFrom(gather)
        new.input[1] = find.name
        new.attr["Tindices"].type = index_type
        replaced[gather.name] = [new]
    unused = set(ancestors) | set(_chain_behind(nodes, find.input[2]))
    result = rebuilt_graph(graph_def, replaced, set(region.inner))
    result = rebuilt_graph(result, {}, _unread(result, unused, protected))
    log.info("LiteRT source: the index map after lookup %s folded into its table (%d ops "
             "fewer)", find.name, len(region.inner))
    return FoldedTable(graph_def=result, values=index[:-1])
