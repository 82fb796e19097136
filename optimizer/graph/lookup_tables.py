"""Lookup tables a signature only reads, folded into constants and stateless ops at freeze time.

``convert_variables_to_constants_v2`` makes a signature's variables constants, but each lookup
table the signature captures (``tf.lookup.StaticHashTable``, Keras ``StringLookup``,
``IntegerLookup`` and ``TextVectorization``, a TF Transform vocabulary initialized from the
model's ``assets/``) stays a resource input: the frozen graph then has an input more than the
signature, which no caller can feed ("freezing left 2 inputs for 1 signature inputs").

The table could be kept: ``HashTableV2`` and its initializer in the frozen graph, an init op and
the asset file in the written SavedModel. Then every graph transform would have to know that the
initializer must run before the first lookup (strip_unused_nodes would drop it: no output reads
it), that two ``HashTableV2`` nodes with equal attributes are two tables
(merge_duplicate_nodes would merge them), and the equivalence check's runner would have to run
the init op. A table the signature only reads is a constant function of its keys instead, so it
is folded:

- its contents are read once from the *loaded* model, as TensorFlow initialized them (from
  constants, or from the model's own asset file), with ``LookupTableExportV2``, and checked by
  looking every exported key up again;
- each ``LookupTableFindV2`` becomes a binary search (``LowerBound``) over the sorted keys (string
  keys are searched by their 64-bit fingerprint, ``StringToHashBucketFast``), the key found there
  is compared with the key looked up, and a miss gets the find's default value. A token that is
  not in the table, even one whose fingerprint equals a key's, gets the default, as from the
  table itself. The last node keeps the find's name, so nothing downstream is rewired. At
  batch 1 each op counts (the executor's per-op cost is most of such a model's time), so a
  sentinel past the last key ends the search instead of a ``Minimum`` clamping it, and the
  keys' shape, when a signature input declares it, is a constant instead of a ``Shape``;
- ``LookupTableSizeV2`` becomes a constant;
- a find whose result only indexes a constant (``StringLookup -> Embedding``) is then folded
  into it: one gather of precomputed rows (:mod:`tfopt.optimizer.graph.lookup_gathers`).

The frozen graph stays one pure function: every transform, the equivalence check and TF Serving
see ordinary ops, and the written SavedModel needs no init op and no asset. The search costs a
little more than a hash table's probe: measured with ``benchmarks/string_lookup.py`` (10000
keys, 16 tokens an example, one process), the frozen graph is 1.07x faster than the same graph
with its table kept at batch 1 and 1.09x slower at batch 32, and faster than the stock model at
both. A table the
signature also writes, or hands to another function, is not static: freezing it raises
:class:`TableNotFoldable` naming the op. So does a TF1 SavedModel whose tables are nodes of the
signature's own graph (TensorFlow's freezing cannot prune their initializers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.errors import TfoptError, first_line
from tfopt.optimizer.graph.consts import PASS_THROUGH_OPS, resolve_through_identity
from tfopt.optimizer.graph.control_flow import ENTER_OPS, SWITCH_OPS, nodes_under_control_flow
from tfopt.optimizer.graph.functional_control_flow import FUNCTIONAL_CONTROL_FLOW_OPS
from tfopt.optimizer.graph.names import is_control_input, node_name_from_input
from tfopt.optimizer.graph.rewrite import make_const

FIND_OP = "LookupTableFindV2"
SIZE_OP = "LookupTableSizeV2"
READ_OPS = frozenset({FIND_OP, SIZE_OP})
# Lowered control flow hands the table's handle into a cond branch or a loop frame through these
# (their first input); they go with the table.
FRAME_FORWARDING_OPS = SWITCH_OPS | ENTER_OPS
# Ops that make a table inside a graph (TF1) rather than receive one as a captured resource.
TABLE_CREATOR_OPS = frozenset({
    "HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2",
    "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2", "MutableDenseHashTable",
    "MutableDenseHashTableV2", "AnonymousHashTable", "AnonymousMutableHashTable",
    "AnonymousMutableHashTableOfTensors", "AnonymousMutableDenseHashTable"})
# StringToHashBucketFast(s, n) is Fingerprint64(s) mod n: the largest n keeps 63 bits of it.
FINGERPRINT_BUCKETS = (1 << 63) - 1
# The folded subgraph of find ``F`` is named ``F/folded_table/...``; its sorted keys are
# ``F/folded_table/keys`` and its key comparison ``F/folded_table/hit``, which
# :mod:`tfopt.optimizer.inputs.vocabulary` reads to draw test tokens from the table.
SCOPE = "folded_table"
KEYS_NODE = "keys"
HIT_NODE = "hit"

RESOURCE = 20  # DataType enum (types.proto)
_STRING = 7
_INT32 = 3
_INT64 = 9
_INT_KEYS = frozenset({_INT32, _INT64})


class TableNotFoldable(TfoptError):
    """A lookup table in the signature is not a static one this freeze can fold."""


class TableReadInFunction(TableNotFoldable):
    """A table passed into a functional If/While/Case: its lookups are in the branch or body
    functions, which folding does not reach; lowered to Switch/Merge frames they are not."""


@dataclass(frozen=True)
class TableContents:
    """A table's keys and values, in the order the folded search uses: sorted by key, or by key
    fingerprint for string keys (then ``fingerprints`` holds them)."""

    keys: np.ndarray
    values: np.ndarray
    fingerprints: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)


def check_no_graph_tables(fn) -> None:
    """Refuse a signature whose tables are made in its own graph (a TF1 SavedModel's tables, or
    one built inside the serving function) rather than captured."""
    owned = [op for op in fn.graph.get_operations() if op.type in TABLE_CREATOR_OPS]
    if owned:
        raise TableNotFoldable(
            f"lookup table '{owned[0].name}' ({owned[0].type}) is made inside the signature's "
            f"graph (a TF1 SavedModel's table), which TensorFlow's freezing cannot keep "
            f"initialized; re-export the model with tf.saved_model.save, the table made "
            f"outside the serving function")


def _node(name: str, op: str, inputs: list[str], device: str = "", **attrs):
    """A NodeDef; attribute values: int -> int attr, bool -> bool attr, ("type", enum) ->
    type attr."""
    from tensorflow.core.framework import node_def_pb2

    node = node_def_pb2.NodeDef(name=name, op=op, input=inputs, device=device)
    for key, value in attrs.items():
        if isinstance(value, tuple):
            node.attr[key].type = value[1]
        elif isinstance(value, bool):
            node.attr[key].b = value
        else:
            node.attr[key].i = value
    return node


def _type(enum: int) -> tuple[str, int]:
    return ("type", enum)


def sorted_contents(keys: np.ndarray, values: np.ndarray, where: str) -> TableContents:
    """``keys``/``values`` in search order; refuses duplicate keys (or key fingerprints)."""
    fingerprints = None
    if keys.dtype.kind in "OSU":
        from tfopt.optimizer.tf_runtime import import_tensorflow

        tf = import_tensorflow()
        fingerprints = tf.strings.to_hash_bucket_fast(tf.constant(keys, tf.string),
                                                      FINGERPRINT_BUCKETS).numpy()
        order = np.argsort(fingerprints, kind="stable")
        search = fingerprints = fingerprints[order]
    else:
        order = np.argsort(keys, kind="stable")
        search = keys[order]
    if len(search) > 1 and np.any(search[1:] == search[:-1]):
        what = "keys" if fingerprints is None else "key fingerprints"
        raise TableNotFoldable(f"{where}: the table holds duplicate {what}, which a sorted "
                               f"search cannot tell apart")
    return TableContents(keys=keys[order], values=values[order], fingerprints=fingerprints)


def export_table(handle, key_dtype, value_dtype, where: str) -> TableContents:
    """The contents of a loaded table, read with ``LookupTableExportV2`` and checked by looking
    each key up again (which also refuses tables whose export holds empty slots, as a
    ``DenseHashTable``'s does)."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    try:
        keys, values = tf.raw_ops.LookupTableExportV2(table_handle=handle, Tkeys=key_dtype,
                                                      Tvalues=value_dtype)
        default = tf.zeros([], value_dtype) if value_dtype != tf.string else tf.constant("")
        found = tf.raw_ops.LookupTableFindV2(table_handle=handle, keys=keys,
                                             default_value=default)
    except (tf.errors.OpError, TypeError, ValueError) as exc:
        raise TableNotFoldable(f"{where}: cannot read the table's contents: "
                               f"{first_line(exc)}") from None
    keys, values, found = keys.numpy(), values.numpy(), found.numpy()
    if values.ndim != 1:
        raise TableNotFoldable(f"{where}: the table maps a key to a vector of shape "
                               f"{list(values.shape[1:])}; only scalar values are folded")
    if not np.array_equal(values, found):
        raise TableNotFoldable(f"{where}: the table's exported contents do not match its "
                               f"lookups")
    return sorted_contents(keys, values, where)


def captured_tables(fn, frozen_fn) -> dict[str, object]:
    """Resource inputs of ``frozen_fn`` -> the captured handle behind each, in ``fn``.

    A captured tensor of a concrete function is its input after the structured arguments; the
    frozen function keeps the names of the inputs it did not turn into constants.
    """
    arguments = len(fn.inputs) - len(fn.captured_inputs)
    handles = {node_name_from_input(t.name): h
               for t, h in zip(fn.inputs[arguments:], fn.captured_inputs)}
    return {node_name_from_input(t.name): handles.get(node_name_from_input(t.name))
            for t in frozen_fn.inputs if t.dtype.as_datatype_enum == RESOURCE}


def _readers(graph_def) -> dict[str, list]:
    readers: dict[str, list] = {}
    for node in graph_def.node:
        for inp in node.input:
            readers.setdefault(node_name_from_input(inp), []).append(node)
    return readers


def table_uses(graph_def, table: str) -> tuple[list, list[str]]:
    """The find/size nodes reading ``table`` (a resource placeholder) and the Identity-like
    nodes between them; raises :class:`TableNotFoldable` for any other reader."""
    readers = _readers(graph_def)
    by_name = {n.name: n for n in graph_def.node}
    uses, forwarders, pending, seen = [], [], [table], set()
    while pending:
        name = pending.pop()
        for reader in readers.get(name, []):
            if reader.name in seen:
                continue
            seen.add(reader.name)
            edges = [i for i in reader.input if node_name_from_input(i) == name]
            if all(is_control_input(e) for e in edges):
                if by_name[name].op in FRAME_FORWARDING_OPS:
                    # a control edge from a Switch or Enter places its reader in a branch or
                    # frame: dropping it would move the reader out
                    raise TableNotFoldable(f"{by_name[name].op} node '{name}' passes a lookup "
                                           f"table on and orders node '{reader.name}'; "
                                           f"folding the table would move that node")
                continue  # ordering only; dropped with the table
            if reader.op in READ_OPS and node_name_from_input(reader.input[0]) == name:
                uses.append(reader)
            elif (reader.op in PASS_THROUGH_OPS and reader.op != "IdentityN"
                  or reader.op in FRAME_FORWARDING_OPS
                  and node_name_from_input(reader.input[0]) == name):
                forwarders.append(reader.name)
                pending.append(reader.name)
            else:
                error = (TableReadInFunction if reader.op in FUNCTIONAL_CONTROL_FLOW_OPS
                         else TableNotFoldable)
                raise error(
                    f"lookup table input '{table}' is read by {reader.op} node "
                    f"'{reader.name}': only tables the signature merely looks up "
                    f"({', '.join(sorted(READ_OPS))}) can be folded into constants")
    return uses, forwarders


def _placeholder_shape(nodes_by_name: dict, tensor: str) -> list[int] | None:
    """The shape of ``tensor`` when it is a signature input whose declared shape leaves one
    dimension unknown at most (the batch): a ``Reshape`` can then take it as a constant, with
    ``-1`` for that one, instead of a ``Shape`` op computing it on every call."""
    node = resolve_through_identity(nodes_by_name, tensor)
    if node is None or node.op != "Placeholder" or "shape" not in node.attr:
        return None
    shape = node.attr["shape"].shape
    dims = [d.size for d in shape.dim]
    if shape.unknown_rank or sum(d < 0 for d in dims) > 1:
        return None
    return [-1 if d < 0 else d for d in dims]


def _find_nodes(find, contents: TableContents, anchored: bool,
                keys_shape: list[int] | None = None) -> list:
    """The nodes replacing ``find``; the last one takes its name. ``keys_shape``: the looked-up
    keys' static shape (:func:`_placeholder_shape`), when known."""
    _, keys, default = (i for i in find.input if not is_control_input(i))
    controls = [i for i in find.input if is_control_input(i)]
    scope = f"{find.name}/{SCOPE}"
    device = find.device
    key_type = find.attr["Tin"].type
    value_type = find.attr["Tout"].type
    nodes = []

    def const(name: str, value: np.ndarray):
        node = make_const(f"{scope}/{name}", value, device)
        if anchored:
            # Inside a while frame or a cond branch a Const needs a control input from there.
            node.input.append(f"^{scope}/anchor")
        nodes.append(node)
        return node.name

    if anchored:
        nodes.append(_node(f"{scope}/anchor", "Identity", [keys], device, T=_type(key_type)))
    shape = f"{scope}/keys_shape"
    if keys_shape is not None and len(contents):
        const("keys_shape", np.array(keys_shape, np.int32))
    else:
        nodes.append(_node(shape, "Shape", [keys], device, T=_type(key_type),
                           out_type=_type(_INT32)))
    if len(contents) == 0:
        nodes.append(_node(find.name, "Fill", [shape, default, *controls], device,
                           T=_type(value_type), index_type=_type(_INT32)))
        return nodes
    # One entry past the keys: the search's sentinel (the largest value of its type, at
    # least any probe), so a probe above every key finds position len(contents) instead of
    # running off the end, with no Minimum to clamp it. The key there is the first key,
    # which can't hit: a probe equal to it finds its own position, before the sentinel.
    keys_const = const(KEYS_NODE, np.concatenate([contents.keys, contents.keys[:1]]))
    values_const = const("values", np.concatenate([contents.values, contents.values[:1]]))
    if contents.fingerprints is not None:
        searched = const("fingerprints", _with_sentinel(contents.fingerprints))
        probe = f"{scope}/fingerprint"
        nodes.append(_node(probe, "StringToHashBucketFast", [keys], device,
                           num_buckets=FINGERPRINT_BUCKETS))
        probe_type = _INT64
    else:
        searched = const("sorted", _with_sentinel(contents.keys))
        probe, probe_type = keys, key_type
    row = const("row", np.array([1, -1], np.int32))
    axis = const("axis", np.array(0, np.int32))
    nodes += [
        _node(f"{scope}/row_probe", "Reshape", [probe, row], device, T=_type(probe_type),
              Tshape=_type(_INT32)),
        _node(f"{scope}/lower_bound", "LowerBound", [searched, f"{scope}/row_probe"], device,
              T=_type(probe_type), out_type=_type(_INT32)),
        _node(f"{scope}/position", "Reshape", [f"{scope}/lower_bound", shape], device,
              T=_type(_INT32), Tshape=_type(_INT32)),
        _node(f"{scope}/found_key", "GatherV2", [keys_const, f"{scope}/position", axis], device,
              Tparams=_type(key_type), Tindices=_type(_INT32), Taxis=_type(_INT32),
              batch_dims=0),
        _node(f"{scope}/{HIT_NODE}", "Equal", [f"{scope}/found_key", keys], device,
              T=_type(key_type), incompatible_shape_error=True),
        _node(f"{scope}/found_value", "GatherV2", [values_const, f"{scope}/position", axis],
              device, Tparams=_type(value_type), Tindices=_type(_INT32), Taxis=_type(_INT32),
              batch_dims=0),
        _node(find.name, "SelectV2", [f"{scope}/{HIT_NODE}", f"{scope}/found_value", default,
                                      *controls], device, T=_type(value_type)),
    ]
    return nodes


def _with_sentinel(sorted_keys: np.ndarray) -> np.ndarray:
    """``sorted_keys`` as the one row ``LowerBound`` searches, the type's largest value after
    them (string keys are searched by their int64 fingerprints)."""
    top = np.inf if sorted_keys.dtype.kind == "f" else np.iinfo(sorted_keys.dtype).max
    sentinel = np.array([top], sorted_keys.dtype)
    return np.concatenate([sorted_keys.reshape(-1), sentinel]).reshape(1, -1)


def fold_tables(graph_def, tables: dict[str, TableContents]):
    """A copy of ``graph_def`` with every read of the tables in ``tables`` (resource
    placeholder name -> contents) folded, and the placeholders gone."""
    replaced: dict[str, list] = {}
    dropped: set[str] = set()
    in_control_flow = None
    for table, contents in tables.items():
        uses, forwarders = table_uses(graph_def, table)
        dropped.update([table, *forwarders])
        for use in uses:
            if use.op == SIZE_OP:
                size = make_const(use.name, np.array(len(contents), np.int64), use.device)
                size.input.extend(i for i in use.input if is_control_input(i))
                replaced[use.name] = [size]
                continue
            key_type = use.attr["Tin"].type
            if key_type != _STRING and key_type not in _INT_KEYS:
                raise TableNotFoldable(f"lookup '{use.name}' has keys of DataType {key_type}; "
                                       f"folded tables take string or integer keys")
            if in_control_flow is None:
                in_control_flow = nodes_under_control_flow(graph_def)
                by_name = {n.name: n for n in graph_def.node}
            keys = [i for i in use.input if not is_control_input(i)][1]
            replaced[use.name] = _find_nodes(use, contents, use.name in in_control_flow,
                                             _placeholder_shape(by_name, keys))
    return rebuilt_graph(graph_def, replaced, dropped)


def rebuilt_graph(graph_def, replaced: dict[str, list], dropped: set[str]):
    """A copy of ``graph_def`` without the ``dropped`` nodes (and every edge from them), each
    node named in ``replaced`` giving way to its list of new nodes."""
    from tensorflow.core.framework import graph_pb2

    result = graph_pb2.GraphDef()
    result.versions.CopyFrom(graph_def.versions)
    result.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name in dropped:
            continue
        for new in replaced.get(node.name, [node]):
            copy = result.node.add()
            copy.CopyFrom(new)
            kept = [i for i in copy.input if node_name_from_input(i) not in dropped]
            if len(kept) != len(copy.input):
                del copy.input[:]
                copy.input.extend(kept)
    return result
