"""constant_reshape_shapes: a ``Reshape`` whose target shape is computed at run time from the
batch size gets that shape as a constant, with ``-1`` for the one dimension not known statically.

Why: Keras writes a dense layer on a rank-3 input as Tensordot (``Shape``, ``GatherV2``,
``Prod``, ``Pack``, ``ConcatV2`` to build ``[batch * length, features]`` and back): the batch is
unknown when the model is exported, so the shapes are computed on every call. At batch 1 the
executor's cost per op is what such a model spends beside its matrix products. On the
BERT-style encoder of ``benchmarks/families.py`` these shape computations are 56 of the
optimized graph's 390 non-constant nodes. (:mod:`flatten_dense_matmuls
<tfopt.optimizer.transforms.flatten_dense_matmuls>` writes the reshapes it adds with constant targets
itself where it can.)

Grappler's constant folding cannot remove them (a shape with an unknown dimension is not a
constant), but ``Reshape`` infers one dimension itself: when static shape inference gives the
Reshape's output every dimension but at most one, that shape, the unknown dimension written
``-1``, is the same target for every input the graph accepts. The Reshape then reads a ``Const``
and the computation feeding its old target is dropped where nothing else reads it. The Reshape
keeps its name and its input; the values it produces do not change (it moves no element), so
the rewrite is exact.

The target's entries are followed through the shape arithmetic (``Shape`` of a tensor of known
rank, ``StridedSlice``, ``GatherV2``, ``Prod``, ``Pack``, ``ConcatV2``, ``Cast``) as far as the
static shapes give them, an unknown dimension staying unknown (:class:`ShapeValues`): TensorFlow's
own inference gives up at ``Prod`` and leaves the Tensordot's ``[batch * length, features]`` as
``[?, ?]``.

Left alone: a Reshape whose output has two or more unknown dimensions or an unknown rank, one
that already reads a constant, one under v1 control flow (a frame's Reshape may see other
shapes on each iteration), and the boundary nodes' shape computations (an input or output of
the signature is never removed).
"""

from __future__ import annotations

import numpy as np

from tfopt.optimizer.graph.const_eval import is_pure
from tfopt.optimizer.graph.consts import values_from_const
from tfopt.optimizer.graph.control_flow import nodes_under_control_flow
from tfopt.optimizer.graph.names import is_control_input, node_name_from_input, output_index
from tfopt.optimizer.graph.rewrite import add_node, remove_unread
from tfopt.optimizer.graph.shapes import infer_shapes, static_shape
from tfopt.optimizer.graph.traversal import nodes_by_name
from tfopt.optimizer.transforms.base import Transform, TransformContext


class ConstantReshapeShapes(Transform):
    name = "constant_reshape_shapes"

    def transform(self, graph_def, context: TransformContext):
        # Each round can make the next shapes known (a Reshape's output after its target became
        # a constant feeds the next layer's Shape), so repeat until a round changes nothing.
        while self._one_round(graph_def, context):
            pass
        return graph_def

    @staticmethod
    def _one_round(graph_def, context: TransformContext) -> bool:
        from tensorflow.core.framework import types_pb2

        by_name = nodes_by_name(graph_def)
        reshapes = [n for n in graph_def.node if n.op == "Reshape"
                    and by_name[node_name_from_input(n.input[1])].op != "Const"]
        if not reshapes:
            return False
        shapes = infer_shapes(graph_def)
        in_frames = nodes_under_control_flow(graph_def)
        values = ShapeValues(by_name, shapes)
        old_targets: list[str] = []
        for reshape in reshapes:
            if reshape.name in in_frames:
                continue
            target = _constant_target(values.of(reshape.input[1]),
                                      static_shape(shapes, reshape.name))
            if target is None:
                continue
            old_targets.append(node_name_from_input(reshape.input[1]))
            int64 = reshape.attr["Tshape"].type == types_pb2.DT_INT64
            const = add_node(graph_def, by_name, "Const", f"{reshape.name}/static_shape",
                             device=reshape.device,
                             value=target.astype(np.int64 if int64 else np.int32))
            reshape.input[1] = const.name
        remove_unread(graph_def, old_targets, context.boundary, is_pure)
        return bool(old_targets)


def _constant_target(computed, output_shape) -> np.ndarray | None:
    """The Reshape's target as a constant, or None. Each entry is what the computation gives
    (``computed``, from :class:`ShapeValues`), else the Reshape's statically inferred output
    (``output_shape``), else ``-1``; more than one ``-1``: None."""
    computed = computed if isinstance(computed, list) else None  # UNFOLLOWED, or a scalar
    rank = len(output_shape) if output_shape is not None else \
        len(computed) if computed is not None else None
    if rank is None or (computed is not None and len(computed) != rank):
        return None
    entries = []
    for i in range(rank):
        value = computed[i] if computed is not None else DYNAMIC
        if value is DYNAMIC or value == -1:
            value = output_shape[i] if output_shape is not None else DYNAMIC
        entries.append(-1 if value is DYNAMIC else value)
    return None if entries.count(-1) > 1 else np.array(entries)


# What :meth:`ShapeValues.of` gives for a tensor it does not follow.
UNFOLLOWED = object()
# An entry of a shape value that depends on a dimension not known statically (the batch).
DYNAMIC = None


class ShapeValues:
    """The values of the small integer tensors a graph computes shapes with, as far as they
    follow from the static shapes: a vector is a list of entries, a scalar one entry, and an
    entry an int or :data:`DYNAMIC`. A tensor not followed here has no value (:meth:`of` gives
    :data:`UNFOLLOWED`)."""

    def __init__(self, by_name: dict, shapes: dict):
        self.by_name, self.shapes, self.memo = by_name, shapes, {}

    def of(self, tensor: str):
        if tensor not in self.memo:
            self.memo[tensor] = UNFOLLOWED  # a cycle through a loop is not followed
            node = self.by_name.get(node_name_from_input(tensor))
            try:
                self.memo[tensor] = UNFOLLOWED if node is None or output_index(tensor) else \
                    self._evaluate(node)
            except (ValueError, IndexError, TypeError):  # a form not followed here
                self.memo[tensor] = UNFOLLOWED
        return self.memo[tensor]

    def _evaluate(self, node):
        op, inputs = node.op, [i for i in node.input if not is_control_input(i)]
        if op == "Const":
            value = values_from_const(node)
            if value.dtype.kind != "i" or value.ndim > 1:
                return UNFOLLOWED
            return value.tolist()
        if op == "Shape":
            shape = static_shape(self.shapes, inputs[0])
            return UNFOLLOWED if shape is None else list(shape)
        if op in ("Identity", "Cast"):
            return self.of(inputs[0])
        args = [self.of(i) for i in inputs]
        if any(a is UNFOLLOWED for a in args):
            return UNFOLLOWED
        if op == "GatherV2" and args[2] == 0 and isinstance(args[0], list):
            return [args[0][i] for i in args[1]] if isinstance(args[1], list) \
                else args[0][args[1]]
        if op == "Prod" and args[1] in (0, [0]) and isinstance(args[0], list):
            product = _product(args[0])
            return [product] if node.attr["keep_dims"].b else product
        if op == "Pack" and node.attr["axis"].i == 0 and not any(
                isinstance(a, list) for a in args):
            return list(args)
        if op == "ConcatV2" and args[-1] in (0, -1) and all(
                isinstance(a, list) for a in args[:-1]):
            return [entry for part in args[:-1] for entry in part]
        if op == "StridedSlice":
            return _strided_slice(node, *args)
        return UNFOLLOWED


def _product(entries):
    if 0 in entries:
        return 0
    return DYNAMIC if DYNAMIC in entries else int(np.prod(entries, dtype=np.int64))


def _strided_slice(node, vector, begin, end, strides):
    """A 1-D slice with at most begin/end masks and a shrink to a scalar."""
    attrs = node.attr
    if (not isinstance(vector, list) or attrs["ellipsis_mask"].i or attrs["new_axis_mask"].i
            or len(begin) != 1):
        return UNFOLLOWED
    start = None if attrs["begin_mask"].i & 1 else begin[0]
    stop = None if attrs["end_mask"].i & 1 else end[0]
    if attrs["shrink_axis_mask"].i & 1:
        return vector[start]
    return vector[start:stop:strides[0]]
