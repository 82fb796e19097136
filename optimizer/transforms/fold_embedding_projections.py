"""fold_embedding_projections: a dense layer after a mean-pooled embedding lookup, folded into
the embedding's rows.

Why: a bag-of-tokens classifier (Keras ``Embedding -> GlobalAveragePooling1D -> Dense``, a TF
Transform vocabulary into ``tf.gather``, ``tf.reduce_mean``, ``tf.matmul``) freezes to

    GatherV2(table [rows, d], ids) -> Mean(over the token axes) -> MatMul(W [d, n]) -> BiasAdd(b)

The product and the bias are linear, so they commute with the mean:
``mean_i(table[ids_i]) @ W + b == mean_i((table @ W + b)[ids_i])``. With ``table @ W + b``
computed once, here, the graph is ``GatherV2(projected [rows, n], ids) -> Mean``: two ops fewer
and ``n`` columns gathered and averaged instead of ``d``. At batch 1 such a model is a handful
of small ops, each paying the executor's per-op cost, and the product is the most expensive of
them (oneDNN's fixed cost per call): on the StringLookup classifier of
``benchmarks/string_lookup.py`` (10000 rows of 64, Dense(10)) the optimized call went from
72 to 66 us (1.30x to 1.41x the stock call; ``--bindings``). The projected rows are computed in
float64 and rounded once; the model's outputs then differ from the original's by float32
rounding of a reordered sum (5e-9 on that model's logits).

Folded only where it is safe and does not grow the model: the table, ``W`` and ``b`` are float32
constants; the gather is on axis 0 with no batch dimensions; the mean reduces only axes before
the feature axis (static shapes say which) to a rank-2 ``[batch, d]``; ``n <= d`` (the table
does not grow); each of gather, mean and product is read only by the next (the gather may also be a
control input: it stays), and none of them but
the last (which keeps its name as the new mean, so nothing downstream is rewired) is a boundary
node. The table is replaced in place when nothing else reads it, else a new constant is added.
A ``Sum`` pooling is left alone (its bias would be counted once per token).
"""

from __future__ import annotations

import logging

import numpy as np

from tfopt.optimizer.graph.consts import (
    PASS_THROUGH_OPS,
    resolve_through_identity,
    values_from_const,
)
from tfopt.optimizer.graph.names import canonical_input, is_control_input, node_name_from_input
from tfopt.optimizer.graph.rewrite import drop_nodes, only_reader, remove_unread, write_const_input
from tfopt.optimizer.graph.shapes import infer_shapes, static_shape
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)

DT_FLOAT = 1  # types.proto
BIAS_ADDS = frozenset({"BiasAdd", "AddV2", "Add"})


class FoldEmbeddingProjections(Transform):
    name = "fold_embedding_projections"
    params = ()

    def transform(self, graph_def, context: TransformContext):
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        chains = [c for c in (self._chain(n, by_name, readers, context.boundary)
                              for n in graph_def.node if n.op == "MatMul") if c]
        if not chains:
            return graph_def
        shapes = infer_shapes(graph_def)
        removed: set[str] = set()
        leftovers: list[str] = []  # the weights and biases, unread once folded
        folded = 0
        for gather, mean, matmul, bias_add in chains:
            projected = self._projected_rows(gather, mean, matmul, bias_add, by_name, shapes)
            if projected is None:
                continue
            write_const_input(graph_def, by_name, readers, gather, 0, projected,
                              f"{gather.name}/projected_rows", keep=context.boundary)
            if "_output_shapes" in gather.attr:  # its rows are n wide now
                del gather.attr["_output_shapes"]
            leftovers += [node_name_from_input(matmul.input[1]),
                          *([node_name_from_input(bias_add.input[1])] if bias_add else [])]
            last = bias_add or matmul
            # the last node keeps its name as the mean over the projected rows
            name, device = last.name, last.device
            inputs = [*mean.input, *(i for i in (*matmul.input, *(
                bias_add.input if bias_add else ())) if is_control_input(i))]
            attrs = {k: v for k, v in mean.attr.items() if k != "_output_shapes"}
            last.Clear()
            last.name, last.op, last.device = name, "Mean", device
            last.input.extend(inputs)
            for key, value in attrs.items():
                last.attr[key].CopyFrom(value)
            removed.update({mean.name} | ({matmul.name} if bias_add else set()))
            folded += 1
        drop_nodes(graph_def, removed)
        remove_unread(graph_def, leftovers, context.boundary,
                      lambda node: node.op == "Const" or node.op in PASS_THROUGH_OPS)
        log.debug("%s: %d projection(s) folded into their embedding", self.name, folded)
        return graph_def

    @staticmethod
    def _chain(matmul, by_name, readers, boundary):
        """``(gather, mean, matmul, bias add or None)`` around ``matmul``, each read only by
        the next; else None."""
        if (matmul.attr["T"].type != DT_FLOAT or matmul.attr["transpose_a"].b
                or matmul.attr["transpose_b"].b
                or any(is_control_input(i) for i in matmul.input)
                or not _is_float_const(by_name, matmul.input[1], rank=2)):
            return None
        mean = by_name.get(node_name_from_input(matmul.input[0]))
        if (mean is None or mean.op != "Mean" or canonical_input(matmul.input[0]) != mean.name
                or only_reader(readers, mean.name) is not matmul
                or any(is_control_input(i) for i in mean.input)):
            return None
        gather = by_name.get(node_name_from_input(mean.input[0]))
        if (gather is None or gather.op != "GatherV2" or gather.attr["batch_dims"].i != 0
                or canonical_input(mean.input[0]) != gather.name
                or _data_readers(readers, gather.name) != [mean]
                or not _is_float_const(by_name, gather.input[0], rank=2)
                or not _is_const_value(by_name, gather.input[2], 0)):
            return None
        bias_add = only_reader(readers, matmul.name)
        if not (bias_add is not None and bias_add.op in BIAS_ADDS
                and canonical_input(bias_add.input[0]) == matmul.name
                and _is_float_const(by_name, bias_add.input[1], rank=1)
                and (bias_add.op != "BiasAdd"
                     or bias_add.attr["data_format"].s in (b"", b"NHWC"))):
            bias_add = None
        inner = {gather.name, mean.name} | ({matmul.name} if bias_add else set())
        if inner & boundary:
            return None
        return gather, mean, matmul, bias_add

    def _projected_rows(self, gather, mean, matmul, bias_add, by_name, shapes):
        table = values_from_const(resolve_through_identity(by_name, gather.input[0]))
        weight = values_from_const(resolve_through_identity(by_name, matmul.input[1]))
        gathered = static_shape(shapes, gather.name)
        pooled = static_shape(shapes, mean.name)
        axes = resolve_through_identity(by_name, mean.input[1])
        if gathered is None or pooled is None or axes is None or axes.op != "Const":
            log.debug("%s: %s left, its shapes are not static", self.name, matmul.name)
            return None
        rank = len(gathered)
        reduced = {int(a) % rank for a in np.atleast_1d(values_from_const(axes))} if rank else {0}
        d, n = weight.shape
        if (mean.attr["keep_dims"].b or rank - 1 in reduced or len(pooled) != 2
                or table.shape[1] != d or n > d):
            log.debug("%s: %s left (pooling over %s of %s, table %s, weight %s)", self.name,
                      matmul.name, sorted(reduced), gathered, table.shape, weight.shape)
            return None
        projected = table.astype(np.float64) @ weight.astype(np.float64)
        if bias_add is not None:
            bias = values_from_const(resolve_through_identity(by_name, bias_add.input[1]))
            if bias.shape != (n,):
                return None
            projected += bias
        return projected.astype(np.float32)


def _data_readers(readers, name: str) -> list:
    """The nodes reading ``name`` through a data edge (the gather stays, so a control
    dependency on it, as a function's control outputs have, stays valid)."""
    return [r for r in readers.get(name, [])
            if any(node_name_from_input(i) == name and not is_control_input(i)
                   for i in r.input)]


def _is_float_const(by_name, tensor: str, rank: int) -> bool:
    node = resolve_through_identity(by_name, tensor)
    return (node is not None and node.op == "Const" and node.attr["dtype"].type == DT_FLOAT
            and len(node.attr["value"].tensor.tensor_shape.dim) == rank)


def _is_const_value(by_name, tensor: str, value: int) -> bool:
    node = resolve_through_identity(by_name, tensor)
    return node is not None and node.op == "Const" and np.all(values_from_const(node) == value)
