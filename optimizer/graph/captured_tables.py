"""The lookup tables a frozen signature captures, folded at freeze time.

Each table the signature only reads is exported from the loaded model and folded into constants
and stateless ops (:mod:`tfopt.optimizer.graph.lookup_tables`); then each folded lookup whose only use
is to index an embedding is folded into one gather of precomputed rows
(:mod:`tfopt.optimizer.graph.lookup_gathers`). What is left is one pure function of the signature's
inputs, with no resource input.
"""

from __future__ import annotations

import logging

import numpy as np

from tfopt.optimizer.errors import first_line
from tfopt.optimizer.graph.lookup_gathers import fold_lookups_into_gathers
from tfopt.optimizer.graph.lookup_tables import (
    FIND_OP,
    RESOURCE,
    TableContents,
    TableNotFoldable,
    captured_tables,
    export_table,
    fold_tables,
    table_uses,
)
from tfopt.optimizer.graph.names import node_name_from_input

log = logging.getLogger(__name__)


def fold_captured_tables(fn, frozen_fn):
    """``frozen_fn``'s graph with the tables ``fn`` captures folded, and its input tensor names
    without their resource placeholders: what :func:`tfopt.optimizer.model.freeze.freeze` continues with."""
    graph_def = frozen_fn.graph.as_graph_def()
    handles = captured_tables(fn, frozen_fn)
    inputs = [t.name for t in frozen_fn.inputs if node_name_from_input(t.name) not in handles]
    if not handles:
        return graph_def, inputs
    tables = {}
    for table, handle in handles.items():
        uses, _ = table_uses(graph_def, table)
        finds = [u for u in uses if u.op == FIND_OP]
        where = f"lookup table input '{table}'"
        if handle is None:
            raise TableNotFoldable(f"{where} of the frozen graph is not a captured table")
        if finds:
            from tfopt.optimizer.tf_runtime import import_tensorflow

            tf = import_tensorflow()
            key_dtype = tf.as_dtype(finds[0].attr["Tin"].type)
            value_dtype = tf.as_dtype(finds[0].attr["Tout"].type)
            tables[table] = export_table(handle, key_dtype, value_dtype, where)
        else:
            tables[table] = _size_only(handle, where)
        log.info("freeze: folded lookup table %s (%d keys, %d lookups) into constants",
                 table, len(tables[table]), len(uses))
    folded = fold_tables(graph_def, tables)
    finds = [u.name for table in tables for u in table_uses(graph_def, table)[0]
             if u.op == FIND_OP]
    folded = fold_lookups_into_gathers(folded, finds, [t.name for t in frozen_fn.outputs])
    leftover = [n.name for n in folded.node if n.op == "Placeholder"
                and n.attr["dtype"].type == RESOURCE]
    if leftover:
        raise TableNotFoldable(f"resource input '{leftover[0]}' is still in the frozen graph")
    return folded, inputs


def _size_only(handle, where: str) -> TableContents:
    """A table the signature only measures: its size, as empty placeholder contents."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    try:
        size = int(tf.raw_ops.LookupTableSizeV2(table_handle=handle).numpy())
    except tf.errors.OpError as exc:
        raise TableNotFoldable(f"{where}: cannot read the table's size: "
                               f"{first_line(exc)}") from None
    return TableContents(keys=np.zeros(size, np.int64), values=np.zeros(size, np.int64))
