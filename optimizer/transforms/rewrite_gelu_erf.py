"""rewrite_gelu_erf: exact GELU written with Erf, where TensorFlow's remapper fuses it.

Why: Keras 3 (``Dense(..., activation="gelu")``, ``keras.activations.gelu``) and
``tf.nn.gelu(approximate=False)`` export exact GELU with ``Erfc``::

    Mul(Mul(0.5, x), Erfc(Mul(Neg(x), 0.70710677)))          # 0.5 * x * erfc(-x / sqrt(2))

TensorFlow's remapper (``IsMatchedMatMulBiasAddAndGeluExact`` in grappler's remapper.cc, pattern
1) fuses ``MatMul -> BiasAdd -> GELU`` into one oneDNN ``_FusedMatMul(fused_ops=[BiasAdd,
GeluExact])`` only for the ``Erf`` spelling, and ONNX has no ``Erfc`` op (tf2onnx refuses it).
This transform writes every exact GELU as that pattern, operand for operand::

    Mul(Mul(AddV2(Erf(Mul(x, 0.70710677)), 1), 0.5), x)      # x * ((1 + erf(x / sqrt(2))) * 0.5)

``erfc(-z) = 1 + erf(z)`` for every z, so this is the same function; float32 rounding differs
(``1 + erf`` rounds where ``erfc`` does not), by at most about 1e-7 relative to x.

A Dense layer on a rank-3 input (a transformer's FFN) is exported as Tensordot: ``MatMul`` on
``[batch * length, features]``, ``Reshape`` back to rank 3, then ``BiasAdd``; the remapper needs
the BiasAdd to read the MatMul itself. When that Reshape keeps the last dimension (so the bias
adds to the same columns) and nothing else reads it or the BiasAdd, the Reshape is moved after
the GELU: ``MatMul -> BiasAdd -> GELU -> Reshape``. Element-wise ops commute with a reshape
that keeps the last axis, so the values do not change at all.

Left alone (debug log): a GELU-like chain whose constants are not 0.5 and 1/sqrt(2) to within
float32 rounding (another function, which no fusion would take), intermediate nodes that are
read elsewhere, inputs, outputs or protected nodes among the nodes that go away. The output node
keeps its name, so its readers need no rewiring. Approximate GELU (``approximate=True``: Tanh
and ``Pow(x, 3)``) is left as it is: TF 2.21's remapper fused neither spelling of it in
this project's measurements, and tf2onnx converts it.

The fusion needs a BiasAdd when TensorFlow loads the graph: Grappler's constant folding drops a
BiasAdd whose bias is all zeros (an untrained Dense) before the remapper runs, and then nothing
fuses; a trained model has non-zero biases.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.graph.const_eval import is_pure
from tfopt.optimizer.graph.consts import resolve_through_identity, values_from_const
from tfopt.optimizer.graph.names import canonical_input, is_control_input, node_name_from_input
from tfopt.optimizer.graph.rewrite import add_node, fold_each
from tfopt.optimizer.graph.shapes import infer_shapes, static_shape
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)

HALF = 0.5
SQRT_HALF = 1.0 / math.sqrt(2.0)
# float32 rounding of the constants, as Keras and TF write them; anything further is not GELU.
CONSTANT_RTOL = 1e-6
FLOAT_TYPES = frozenset({"float32", "float16", "bfloat16"})


@dataclass
class _Gelu:
    output: object  # Mul(half_x, erfc): keeps its name
    half_x: object  # Mul(0.5, x)
    erfc: object
    scaled: object  # Mul(Neg(x), 1/sqrt(2))
    neg: object
    x: str  # the tensor GELU is applied to
    reshape: object | None = None  # Tensordot's Reshape between MatMul and BiasAdd, to move

    @property
    def replaced(self) -> list:
        return [self.half_x, self.erfc, self.scaled, self.neg]

    @property
    def removed(self) -> list:
        """What the rewrite leaves behind: the Erfc form, and the Reshape it moved."""
        return self.replaced + ([self.reshape] if self.reshape is not None else [])


class RewriteGeluErf(Transform):
    name = "rewrite_gelu_erf"
    params = ()

    def transform(self, graph_def, context: TransformContext):
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        found = [g for g in (self._match(n, by_name, readers, context.boundary)
                             for n in list(graph_def.node) if n.op == "Mul") if g]
        if not found:
            return graph_def
        shapes = infer_shapes(graph_def)

        def rewrite(gelu: _Gelu, leftovers: list[str]) -> bool:
            gelu.reshape = self._movable_reshape(gelu, by_name, readers, shapes,
                                                 context.boundary)
            self._rewrite(graph_def, gelu, by_name, leftovers)
            return True

        fold_each(graph_def, found, rewrite, context.boundary, is_pure)
        log.debug("%s: rewrote %d GELU(s), %d moved past their Reshape", self.name, len(found),
                  sum(g.reshape is not None for g in found))
        return graph_def

    def _match(self, output, by_name, readers, boundary) -> _Gelu | None:
        operands = _data_inputs(output, by_name)
        if len(operands) != 2:
            return None
        erfc = next((n for n in operands if n.op == "Erfc"), None)
        half_x = next((n for n in operands if n is not erfc and n.op == "Mul"), None)
        if erfc is None or half_x is None or _dtype(output) not in FLOAT_TYPES:
            return None
        x = _times_constant(half_x, by_name, HALF)
        scaled = by_name.get(node_name_from_input(erfc.input[0]))
        neg_tensor = scaled is not None and scaled.op == "Mul" and _times_constant(
            scaled, by_name, SQRT_HALF)
        neg = by_name.get(node_name_from_input(neg_tensor)) if neg_tensor else None
        if x is None or neg is None or neg.op != "Neg" or canonical_input(neg.input[0]) != x:
            return None
        gelu = _Gelu(output, half_x, erfc, scaled, neg, x)
        reader_of = {half_x.name: output.name, erfc.name: output.name, scaled.name: erfc.name,
                     neg.name: scaled.name}
        shared = [name for name, reader in reader_of.items()
                  if name in boundary or not _read_only_by(readers, name, {reader})]
        if shared:
            log.debug("%s: leaving %s, %s is read elsewhere or must keep its place", self.name,
                      output.name, ", ".join(shared))
            return None
        return gelu

    def _movable_reshape(self, gelu: _Gelu, by_name, readers, shapes, boundary):
        """The Reshape of ``MatMul -> Reshape -> BiasAdd -> GELU`` if it can move after the GELU:
        it keeps the last dimension and only this chain reads it and the BiasAdd."""
        bias_add = by_name.get(node_name_from_input(gelu.x))
        if bias_add is None or bias_add.op != "BiasAdd" or gelu.x != bias_add.name:
            return None
        reshape = by_name.get(node_name_from_input(bias_add.input[0]))
        if reshape is None or reshape.op != "Reshape" or reshape.input[0].startswith("^"):
            return None
        matmul = by_name.get(node_name_from_input(reshape.input[0]))
        if matmul is None or matmul.op != "MatMul" or canonical_input(reshape.input[0]) != \
                matmul.name:
            return None
        before = static_shape(shapes, matmul.name)
        after = static_shape(shapes, reshape.name)
        keeps_last = (before is not None and after is not None and len(before) == 2
                      and before[-1] is not None and after[-1] == before[-1])
        gelu_readers = {gelu.half_x.name, gelu.neg.name}
        if (not keeps_last or bias_add.attr["data_format"].s not in (b"", b"NHWC")
                or {bias_add.name, reshape.name} & boundary
                or not _read_only_by(readers, reshape.name, {bias_add.name})
                or not _read_only_by(readers, bias_add.name, gelu_readers)):
            log.debug("%s: %s stays before %s", self.name, reshape.name, bias_add.name)
            return None
        return reshape

    def _rewrite(self, graph_def, gelu: _Gelu, by_name, leftovers: list[str]) -> None:
        output, device = gelu.output, gelu.output.device
        dtype = output.attr["T"]
        leftovers.extend(node_name_from_input(i) for n in gelu.replaced for i in n.input)
        controls = [i for n in gelu.replaced for i in n.input if is_control_input(i)]
        if gelu.reshape is not None:
            bias_add = by_name[node_name_from_input(gelu.x)]
            bias_add.input[0] = gelu.reshape.input[0]  # the BiasAdd now reads the MatMul

        def add(op: str, base: str, inputs: list[str], value=None):
            return add_node(graph_def, by_name, op, base, inputs, device, {"T": dtype},
                            value).name

        np_type = _numpy_type(output)
        prefix = output.name
        sqrt_half = add("Const", f"{prefix}/sqrt_one_half", [], np.array(SQRT_HALF, np_type))
        one = add("Const", f"{prefix}/one", [], np.array(1.0, np_type))
        half = add("Const", f"{prefix}/one_half", [], np.array(HALF, np_type))
        scaled = add("Mul", f"{prefix}/x_times_sqrt_one_half", [gelu.x, sqrt_half])
        erf = add("Erf", f"{prefix}/erf", [scaled])
        plus_one = add("AddV2", f"{prefix}/erf_plus_one", [erf, one])
        times_half = add("Mul", f"{prefix}/erf_plus_one_times_one_half", [plus_one, half])
        product = [times_half, gelu.x]
        output_controls = [i for i in output.input if is_control_input(i)]
        if gelu.reshape is None:
            del output.input[:]
            output.input.extend(product + output_controls + controls)
            return
        # The GELU moves before the Reshape; the output name now belongs to the Reshape.
        fused = add("Mul", f"{prefix}/gelu", product)
        reshape = gelu.reshape
        shape_input = reshape.input[1]
        output.Clear()
        output.name, output.op, output.device = prefix, "Reshape", reshape.device
        output.input.extend([fused, shape_input] + output_controls + controls + [
            i for i in reshape.input if is_control_input(i)])
        output.attr["T"].CopyFrom(reshape.attr["T"])
        output.attr["Tshape"].CopyFrom(reshape.attr["Tshape"])


def _data_inputs(node, by_name) -> list:
    return [by_name.get(node_name_from_input(i)) for i in node.input if not is_control_input(i)]


def _read_only_by(readers, name: str, allowed: set[str]) -> bool:
    """Whether every reader of ``name`` is in ``allowed``, through data edges of output 0."""
    for reader in readers.get(name, []):
        edges = [i for i in reader.input if node_name_from_input(i) == name]
        if reader.name not in allowed or any(is_control_input(i) or canonical_input(i) != name
                                             for i in edges):
            return False
    return True


def _times_constant(mul, by_name, value: float) -> str | None:
    """The other operand of ``mul`` when one operand is a scalar constant equal to ``value``
    (to float32 rounding); else None."""
    data = [canonical_input(i) for i in mul.input if not is_control_input(i)]
    if len(data) != 2:
        return None
    for const_index in (0, 1):
        const = resolve_through_identity(by_name, data[const_index])
        if const is None or const.op != "Const":
            continue
        constant = values_from_const(const)
        if constant.size == 1 and math.isclose(float(constant.reshape(())), value,
                                               rel_tol=CONSTANT_RTOL):
            return data[1 - const_index]
    return None


def _dtype(node) -> str:
    from tensorflow.python.framework import dtypes

    if "T" not in node.attr:
        return ""
    return dtypes.as_dtype(node.attr["T"].type).name


def _numpy_type(node):
    from tensorflow.python.framework import dtypes

    return dtypes.as_dtype(node.attr["T"].type).as_numpy_dtype
