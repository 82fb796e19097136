"""flatten_dense_matmuls: a dense layer on a rank-3 input as the rank-2 ``MatMul -> BiasAdd``
that oneDNN runs fastest and TensorFlow's remapper fuses.

Why: a transformer applies its dense layers to ``[batch, length, features]``. Keras 3 exports
them in two forms, neither of which the remapper fuses with its bias:

- ``EinsumDense`` (every projection of ``MultiHeadAttention``): ``BatchMatMulV2(x, W)`` with a
  rank-3 ``x`` and a rank-2 constant ``W``, then (query, key, value) a ``Reshape`` splitting the
  heads and an ``AddV2`` of a ``[heads, head_size]`` bias, or (output) a ``BiasAdd``;
- ``Dense`` (the FFN): Tensordot, ``MatMul`` on ``[batch * length, features]``, ``Reshape``
  back to rank 3, then ``BiasAdd``.

oneDNN's batched product broadcasting a rank-2 weight is much slower than its plain matrix
product on the same numbers (``[1, 64, 256] x [256, 256]`` on this project's AVX-512 CPU, 2
threads: BatchMatMulV2 150 us, MatMul 97 us; in bfloat16 107 and 60 us), and a bias after a
``Reshape`` stays a separate op. This transform rewrites, in two steps:

1. ``BatchMatMulV2(x, W)`` (no adjoints, ``W`` a rank-2 constant ``[K, N]``, ``x`` of rank 3 or
   more) becomes ``MatMul(Reshape(x, [-1, K]), W)`` followed by a ``Reshape`` to ``x``'s leading
   dimensions and ``N``; when a ``Reshape`` is the product's only reader, that one reads the
   ``MatMul`` directly instead.
2. ``MatMul -> Reshape -> BiasAdd/AddV2(constant bias)``, where the ``Reshape`` keeps the rows
   (its trailing dimensions multiply to the product's ``N`` columns) and the bias varies only
   along those trailing dimensions, becomes ``MatMul -> BiasAdd(flattened bias) -> Reshape``:
   row-major, the bias lands on the same elements.

Step 2 adds the same float to the same element, so it changes no value; step 1 computes the same
dot products, which oneDNN may sum in another order (last-bit differences). The remapper then
fuses ``MatMul + BiasAdd`` into ``_FusedMatMul`` (oneDNN's fused kernel once loaded).

Left alone: a product or reshape read by other nodes too, a boundary (input, output, protected)
node among those that go away, shapes that static inference does not give, and a bias that
varies along the leading (row) dimensions.

Run it after ``rewrite_gelu_erf``, which moves the FFN's first Reshape past its GELU (that
MatMul's reader is then its BiasAdd, which this transform leaves as it is).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from tfopt.optimizer.graph.consts import resolve_through_identity, values_from_const
from tfopt.optimizer.graph.names import canonical_input, is_control_input, node_name_from_input
from tfopt.optimizer.graph.rewrite import (
    DT_INT32,
    FLOAT_TYPES,
    add_node,
    attr_value,
    drop_nodes,
    only_reader,
    replace_node,
)
from tfopt.optimizer.graph.shapes import infer_shapes, static_shape
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)

BATCH_MATMULS = frozenset({"BatchMatMul", "BatchMatMulV2"})  # V3 types its operands apart
BIAS_ADDS = frozenset({"BiasAdd", "AddV2", "Add"})


class FlattenDenseMatmuls(Transform):
    name = "flatten_dense_matmuls"
    params = ()

    def transform(self, graph_def, context: TransformContext):
        flattened = self._flatten_batch_matmuls(graph_def, context.boundary)
        moved = self._move_biases_before_reshapes(graph_def, context.boundary)
        log.debug("%s: %d batched products made MatMul, %d biases moved before their Reshape",
                  self.name, flattened, moved)
        return graph_def

    # --- step 1 --------------------------------------------------------------------------------

    def _flatten_batch_matmuls(self, graph_def, boundary) -> int:
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        found = [n for n in graph_def.node if self._flattenable(n, by_name)]
        if not found:
            return 0
        shapes = infer_shapes(graph_def)
        removed, flattened = set(), 0
        for product in found:
            x = canonical_input(product.input[0])
            x_shape = static_shape(shapes, x)
            weight = values_from_const(resolve_through_identity(by_name, product.input[1]))
            if x_shape is None or len(x_shape) < 3 or x_shape[-1] != weight.shape[0]:
                log.debug("%s: %s left, its input's shape is %s", self.name, product.name,
                          x_shape)
                continue
            reshape = only_reader(readers, product.name)
            keeps_reshape = (reshape is not None and reshape.op == "Reshape"
                             and canonical_input(reshape.input[0]) == product.name
                             and product.name not in boundary)
            self._rewrite_product(graph_def, by_name, product, x, x_shape, weight.shape,
                                  reshape if keeps_reshape else None)
            flattened += 1
            if keeps_reshape:
                removed.add(product.name)
        drop_nodes(graph_def, removed)
        return flattened

    @staticmethod
    def _flattenable(node, by_name) -> bool:
        if (node.op not in BATCH_MATMULS or node.attr["T"].type not in FLOAT_TYPES
                or node.attr["adj_x"].b or node.attr["adj_y"].b
                or any(is_control_input(i) for i in node.input)):
            return False
        weight = resolve_through_identity(by_name, node.input[1])
        return weight is not None and weight.op == "Const" and len(
            values_from_const(weight).shape) == 2

    def _rewrite_product(self, graph_def, by_name, product, x: str, x_shape, weight_shape,
                         reshape) -> None:
        """``product`` as MatMul on the flattened rows; ``reshape`` (its only reader) or a new
        Reshape in ``product``'s place restores the leading dimensions: a constant target
        when ``x_shape`` knows all of them but one (``-1``), else computed from ``x``'s
        shape on every call."""
        device, dtype, prefix = product.device, attr_value(), product.name
        dtype.CopyFrom(product.attr["T"])  # a copy: the product is cleared below
        k, n = (int(d) for d in weight_shape)

        def add(op: str, base: str, inputs: list[str], attrs: dict | None = None,
                value=None) -> str:
            return add_node(graph_def, by_name, op, base, inputs, device, attrs, value).name

        rows_shape = add("Const", f"{prefix}/rows_shape", [], value=np.array([-1, k], np.int32))
        int32 = attr_value(type=DT_INT32)
        rows = add("Reshape", f"{prefix}/rows", [x, rows_shape], {"T": dtype, "Tshape": int32})
        matmul = add("MatMul", f"{prefix}/matmul", [rows, product.input[1]],
                     {"T": dtype, "transpose_a": attr_value(b=False), "transpose_b": attr_value(b=False)})
        if reshape is not None:
            reshape.input[0] = matmul
            return
        # The product keeps its name as the Reshape back to x's leading dimensions and n.
        leading_dims = list(x_shape[:-1])
        if leading_dims.count(None) <= 1:
            target = [-1 if d is None else d for d in leading_dims] + [n]
            shape = add("Const", f"{prefix}/output_shape", [], value=np.array(target, np.int32))
        else:
            x_dims = add("Shape", f"{prefix}/input_shape", [x], {"T": dtype, "out_type": int32})
            begin = add("Const", f"{prefix}/begin", [], value=np.array([0], np.int32))
            end = add("Const", f"{prefix}/end", [], value=np.array([-1], np.int32))
            stride = add("Const", f"{prefix}/stride", [], value=np.array([1], np.int32))
            leading = add("StridedSlice", f"{prefix}/leading_dims", [x_dims, begin, end, stride],
                          {"T": int32, "Index": int32, "begin_mask": attr_value(i=1)})
            columns = add("Const", f"{prefix}/columns", [], value=np.array([n], np.int32))
            axis = add("Const", f"{prefix}/axis", [], value=np.array(0, np.int32))
            shape = add("ConcatV2", f"{prefix}/output_shape", [leading, columns, axis],
                        {"T": int32, "Tidx": int32, "N": attr_value(i=2)})
        replace_node(product, "Reshape", [matmul, shape], {"T": dtype, "Tshape": int32})

    # --- step 2 --------------------------------------------------------------------------------

    def _move_biases_before_reshapes(self, graph_def, boundary) -> int:
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        chains = [c for c in (self._bias_chain(n, by_name, readers, boundary)
                              for n in graph_def.node if n.op in BIAS_ADDS) if c]
        if not chains:
            return 0
        shapes = infer_shapes(graph_def)
        removed = set()
        for add, reshape, matmul, bias_const in chains:
            flat = self._flat_bias(shapes, matmul, reshape, values_from_const(bias_const))
            if flat is None:
                log.debug("%s: %s stays after %s", self.name, add.name, reshape.name)
                continue
            device, prefix = add.device, add.name
            bias = add_node(graph_def, by_name, "Const", f"{prefix}/flat_bias", device=device,
                            value=flat)
            bias_add = add_node(graph_def, by_name, "BiasAdd", f"{prefix}/bias_add",
                                [matmul.name, bias.name], device,
                                {"T": add.attr["T"], "data_format": attr_value(s=b"NHWC")})
            # The add keeps its name (its readers need no rewiring) as the Reshape.
            shape_input = reshape.input[1]
            controls = [i for i in (*add.input, *reshape.input) if is_control_input(i)]
            add.Clear()
            add.name, add.op, add.device = prefix, "Reshape", reshape.device
            add.input.extend([bias_add.name, shape_input, *controls])
            add.attr["T"].CopyFrom(reshape.attr["T"])
            add.attr["Tshape"].CopyFrom(reshape.attr["Tshape"])
            removed.add(reshape.name)
        drop_nodes(graph_def, removed)
        return len(removed)

    @staticmethod
    def _bias_chain(adder, by_name, readers, boundary):
        """``(add, reshape, matmul, bias Const)`` when ``adder`` adds a constant to
        ``Reshape(MatMul)``, each read only by the next; else None."""
        data = [canonical_input(i) for i in adder.input if not is_control_input(i)]
        if len(data) != 2 or adder.attr["T"].type not in FLOAT_TYPES:
            return None
        if adder.op == "BiasAdd" and adder.attr["data_format"].s not in (b"", b"NHWC"):
            return None
        for reshaped, other in ((data[0], data[1]), (data[1], data[0])):
            if adder.op == "BiasAdd" and reshaped != data[0]:
                continue
            reshape = by_name.get(node_name_from_input(reshaped))
            bias = resolve_through_identity(by_name, other)
            if (reshape is None or reshape.op != "Reshape" or reshaped != reshape.name
                    or bias is None or bias.op != "Const"):
                continue
            matmul = by_name.get(node_name_from_input(reshape.input[0]))
            if (matmul is None or matmul.op != "MatMul"
                    or canonical_input(reshape.input[0]) != matmul.name
                    or {reshape.name, matmul.name} & boundary
                    or only_reader(readers, reshape.name) is not adder
                    or only_reader(readers, matmul.name) is not reshape):
                continue
            return adder, reshape, matmul, bias
        return None

    @staticmethod
    def _flat_bias(shapes, matmul, reshape, bias: np.ndarray):
        """The bias as one value per product column, or None when the Reshape does not keep
        the rows or the bias varies along the rows."""
        product_shape = static_shape(shapes, matmul.name)
        target = static_shape(shapes, reshape.name)
        if product_shape is None or target is None or product_shape[-1] is None:
            return None
        columns = product_shape[-1]
        for split in range(len(target) - 1, -1, -1):
            trailing = target[split:]
            if None in trailing:
                return None
            if math.prod(trailing) == columns:
                break
            if math.prod(trailing) > columns:
                return None
        else:
            return None
        if bias.ndim > len(target):
            return None
        padded = bias.reshape((1,) * (len(target) - bias.ndim) + bias.shape)
        if any(d != 1 for d in padded.shape[:split]):
            return None
        try:
            per_column = np.broadcast_to(padded.reshape(padded.shape[split:]), trailing)
        except ValueError:
            return None
        return np.ascontiguousarray(per_column).reshape(columns)

