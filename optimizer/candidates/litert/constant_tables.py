"""The SavedModel the LiteRT converter reads for a model with lookup tables.

The converter keeps a lookup table as LiteRT's own builtins (``HASHTABLE``,
``HASHTABLE_FIND``, and ``HASHTABLE_IMPORT`` in a ``CALL_ONCE`` initializer subgraph) when the
table imports constant keys and values, as Keras' ``StringLookup`` does. Two things go wrong
when it converts such a SavedModel as it is (measured with TF 2.21 and ai-edge-litert 2.3):

- a table filled from a text file (``InitializeTableFromTextFileV2``: TF Transform's
  vocabularies, ``StringLookup`` given a file) keeps its initializer only when the file name is a
  constant (the ``InitTextFileToImport`` pass joins it to ``assets/`` and reads the file, for
  whole-line keys numbered by line only). In a TF2 SavedModel the file name is the initializer
  function's asset argument, and the initializer is dropped: the ``.tflite`` loads, and every
  lookup fails with "hashtable need to be initialized";
- the converter infers no shape through ``HASHTABLE_FIND``, so an output computed from a lookup
  without a weight to fix its shape (``StringLookup`` straight to the output) is unranked, and
  the converted signature no longer matches the SavedModel's. An op whose output rank does not
  follow its input's (a ``MatMul``: a ``Dense`` layer after the lookup, as in a classifier;
  a ``Reshape`` to a constant shape) gives the converter the rank back.

So for a model with tables the converter reads a rewrite instead (:func:`litert_source`): the
signature frozen (variables as constants, functional control flow kept, which the converter
takes), each table refilled with the contents TensorFlow loaded into it, read with
``LookupTableExportV2`` (:func:`tfopt.optimizer.graph.lookup_tables.export_table`), through a
``KeyValueTensorInitializer``, and each output that a lookup's result reaches with no such op
in between reshaped to the signature's shape, where one unknown dimension at most makes that a
static reshape (LiteRT has no ``EnsureShape``; :func:`lookup_shaped_outputs`). The other
outputs are left as they are: a ``RESHAPE`` on every output put an op on the classifier's
output that a plain conversion of it lacks (:func:`lookup_shaped_outputs` says why only
those). Its signature is the source's; the LiteRT candidates' outputs are then measured
against the source like any other's.

A table whose one lookup only indexes constants through elementwise ops (``StringLookup`` ->
``Embedding``: the embedding's negative-id fix, ``Less``, ``AddV2``, ``SelectV2``) is refilled
with the indices those ops compute from its values, and the ops go
(:func:`tfopt.optimizer.graph.lookup_gathers.fold_index_map_into_table`, the table-kept form of the
frozen graph's lookup-into-gather fold): the converted model runs ``HASHTABLE_FIND``, ``GATHER``
where a plain conversion runs ``HASHTABLE_FIND``, ``LESS``, ``ADD``, ``SELECT_V2``, ``GATHER``.
The same rows are gathered, so it is exact.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tfopt.optimizer.files.atomic import atomic_directory
from tfopt.optimizer.graph.lookup_gathers import fold_index_map_into_table
from tfopt.optimizer.graph.lookup_tables import (
    FIND_OP,
    TABLE_CREATOR_OPS,
    captured_tables,
    check_no_graph_tables,
    export_table,
    table_uses,
)
from tfopt.optimizer.graph.names import is_control_input, node_name_from_input
from tfopt.optimizer.model.assets import TEXT_FILE_TABLE_OPS
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import (
    DEFAULT_SIGNATURE,
    get_signature,
    op_histogram,
    read_saved_model_proto,
    serving_meta_graph,
)
from tfopt.optimizer.tf_runtime import import_tensorflow

log = logging.getLogger(__name__)

SOURCE_DIRECTORY = "litert_source"


def has_lookup_tables(saved_model: str | os.PathLike, policy: ScanPolicy = DEFAULT_POLICY
                      ) -> bool:
    """Whether the model makes or fills a lookup table anywhere (graph or functions)."""
    graph = serving_meta_graph(read_saved_model_proto(saved_model, policy),
                               saved_model).graph_def
    return any(op in TABLE_CREATOR_OPS or op in TEXT_FILE_TABLE_OPS
               for op in op_histogram(graph))


def _refilled_tables(fn, frozen_fn, graph_def, fetches: list[str]):
    """``graph_def`` with each table's index map folded in where it can be
    (:func:`tfopt.optimizer.graph.lookup_gathers.fold_index_map_into_table`), and resource input
    name -> a new StaticHashTable holding what the loaded table holds, or the indices it
    now maps to."""
    tf = import_tensorflow()
    tables = {}
    for table, handle in captured_tables(fn, frozen_fn).items():
        finds = [u for u in table_uses(graph_def, table)[0] if u.op == FIND_OP]
        if handle is None or not finds:
            continue
        key_dtype = tf.as_dtype(finds[0].attr["Tin"].type)
        value_dtype = tf.as_dtype(finds[0].attr["Tout"].type)
        contents = export_table(handle, key_dtype, value_dtype, f"lookup table '{table}'")
        values = contents.values
        folded = (fold_index_map_into_table(graph_def, finds[0].name, values, fetches)
                  if len(finds) == 1 else None)
        if folded is not None:
            graph_def, values = folded.graph_def, folded.values
            value_dtype = tf.as_dtype(values.dtype)
        default = "" if value_dtype == tf.string else 0
        tables[table] = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(contents.keys, key_dtype), tf.constant(values, value_dtype)),
            default_value=tf.constant(default, value_dtype))
    return graph_def, tables


# Ops whose output rank the converter knows whatever its input's: a lookup's unranked result
# stops being unranked there (a Reshape only to a constant shape).
RANK_SETTING_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})


def _sets_rank(node, nodes) -> bool:
    if node.op in RANK_SETTING_OPS:
        return True
    if node.op == "Reshape" and len(node.input) > 1:
        shape = nodes.get(node_name_from_input(node.input[1]))
        return shape is not None and shape.op == "Const"
    return False


def lookup_shaped_outputs(graph_def, fetches: list[str]) -> set[str]:
    """The ``fetches`` (tensor names) a lookup's result reaches along a path with no op that
    sets the rank (:data:`RANK_SETTING_OPS`): those the converter leaves unranked. Data edges
    only; a conservative reach (every output of a reached node), so an output is pinned when
    in doubt."""
    nodes = {n.name: n for n in graph_def.node}
    readers: dict[str, list] = {}
    for node in graph_def.node:
        for inp in node.input:
            if not is_control_input(inp):
                readers.setdefault(node_name_from_input(inp), []).append(node)
    reached, pending = set(), [n.name for n in graph_def.node if n.op == FIND_OP]
    while pending:
        name = pending.pop()
        if name in reached:
            continue
        reached.add(name)
        pending.extend(r.name for r in readers.get(name, []) if not _sets_rank(r, nodes))
    return {f for f in fetches if node_name_from_input(f) in reached}


def _pinned(tf, tensor, shape):
    """``tensor`` reshaped to the signature's ``shape`` where that is a static reshape (one
    unknown dimension at most): LiteRT has no EnsureShape, and a RESHAPE carries the shape."""
    if shape is None or sum(d is None for d in shape) > 1:
        return tensor
    return tf.reshape(tensor, [-1 if d is None else d for d in shape])


def write_constant_table_model(saved_model: str | os.PathLike, dst: str | os.PathLike,
                               signature_name: str = DEFAULT_SIGNATURE, *,
                               policy: ScanPolicy = DEFAULT_POLICY) -> Path:
    """Write at ``dst`` the source's signature with its tables filled from constants; the
    source is read under ``policy``."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    from tfopt.optimizer.model.freeze import load_signature_function

    tf = import_tensorflow()
    signature = get_signature(saved_model, signature_name, policy=policy)
    fn = load_signature_function(saved_model, signature_name, policy=policy)
    check_no_graph_tables(fn)
    frozen_fn = convert_variables_to_constants_v2(fn, lower_control_flow=False)
    fetches = [t.name for t in frozen_fn.outputs]
    module = tf.Module()
    graph_def, tables = _refilled_tables(fn, frozen_fn, frozen_fn.graph.as_graph_def(), fetches)
    module.tables = list(tables.values())
    feeds = [t.name for t in frozen_fn.inputs if node_name_from_input(t.name) not in tables]
    unranked = lookup_shaped_outputs(graph_def, fetches)

    @tf.function(input_signature=[tf.TensorSpec(s.shape, tf.as_dtype(s.dtype), name=s.key)
                                  for s in signature.inputs], autograph=False)
    def serve(*inputs):
        input_map = dict(zip(feeds, inputs))
        # tf.identity captures the table's eager handle into this function's graph
        input_map.update({f"{name}:0": tf.identity(table.resource_handle)
                          for name, table in tables.items()})
        outputs = tf.graph_util.import_graph_def(graph_def, input_map=input_map,
                                                 return_elements=fetches, name="frozen")
        return {s.key: _pinned(tf, t, s.shape) if fetch in unranked else t
                for s, t, fetch in zip(signature.outputs, outputs, fetches)}

    module.serve = serve
    with atomic_directory(dst, overwrite=True) as staging:
        tf.saved_model.save(module, str(staging),
                            signatures={signature_name: serve.get_concrete_function()})
    log.info("LiteRT: %d lookup table(s) of %s refilled from constants in %s", len(tables),
             saved_model, dst)
    return Path(dst)


def litert_source(saved_model: str | os.PathLike, workdir: str | os.PathLike,
                  signature_name: str = DEFAULT_SIGNATURE, *,
                  policy: ScanPolicy = DEFAULT_POLICY) -> Path:
    """The SavedModel to convert: ``saved_model`` itself, or for a model with lookup tables its
    rewrite under ``workdir``; ``saved_model`` is read under ``policy``."""
    if not has_lookup_tables(saved_model, policy):
        return Path(saved_model)
    return write_constant_table_model(saved_model, Path(workdir) / SOURCE_DIRECTORY,
                                      signature_name, policy=policy)
