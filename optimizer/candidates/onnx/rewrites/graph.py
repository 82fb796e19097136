"""A read-only index of an ONNX model for the rewrites, and the one way they build a new model.

:class:`GraphView` answers what a rewrite asks of a graph (who produces a tensor, who reads it,
its constant value, its symbolic shape) without changing it. :func:`rebuilt` writes a rewrite's
result as a fresh :class:`onnx.ModelProto`: the input is copied, never modified, with the
replaced nodes swapped in at their place (so the node order stays topological) and the new
constants added. A replacement keeps the output names of what it replaces, so nothing
downstream needs rewiring.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property

import numpy as np
import onnx
from onnx import helper, numpy_helper

Dim = int | str | None  # a static size, a symbol, or unknown
RECURRENT_OPS = ("LSTM", "GRU", "RNN")


class GraphView:
    """The main graph of ``model``, indexed. Never modifies ``model``."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.graph = model.graph
        self.nodes = list(self.graph.node)
        self.producer: dict[str, tuple[int, onnx.NodeProto]] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for index, node in enumerate(self.nodes):
            for output in node.output:
                if output:
                    self.producer[output] = (index, node)
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
        self.graph_outputs = {o.name for o in self.graph.output}
        inputs = {i.name for i in self.graph.input}
        # An initializer that is also a graph input is a default the caller may override.
        self.initializers = {i.name: i for i in self.graph.initializer if i.name not in inputs}

    @cached_property
    def opset(self) -> int:
        return max((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")),
                   default=1)

    def node_of(self, name: str) -> onnx.NodeProto | None:
        """The node producing tensor ``name`` (None for inputs and initializers)."""
        found = self.producer.get(name)
        return found[1] if found else None

    def produced_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The node producing ``name`` if it is a standard ONNX ``op_type``."""
        node = self.node_of(name)
        return node if node is not None and node.op_type == op_type and \
            node.domain in ("", "ai.onnx") else None

    def index_of(self, node: onnx.NodeProto) -> int:
        return self.producer[node.output[0]][0]

    def only_reader(self, name: str, node: onnx.NodeProto) -> bool:
        """``node`` is the one node reading ``name``, and it is not a graph output."""
        readers = self.consumers.get(name, [])
        return name not in self.graph_outputs and len(readers) == 1 and readers[0] is node

    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is fixed: an initializer or a ``Constant`` node."""
        if name in self.initializers:
            return numpy_helper.to_array(self.initializers[name])
        node = self.node_of(name)
        if node is None or node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            return None
        attribute = node.attribute[0]
        if attribute.name == "value":
            return numpy_helper.to_array(attribute.t)
        if attribute.name in ("value_float", "value_int", "value_floats", "value_ints"):
            return np.asarray(helper.get_attribute_value(attribute))
        return None

    def constant_shape(self, name: str) -> tuple[int, ...] | None:
        """The static shape of a constant without reading its data."""
        if name in self.initializers:
            return tuple(self.initializers[name].dims)
        value = self.constant(name)
        return None if value is None else value.shape

    @cached_property
    def _taken(self) -> set[str]:
        return set(self.producer) | set(self.initializers) | {i.name for i in self.graph.input}

    def unique_name(self, base: str) -> str:
        """``base``, or ``base_1``..., a name no tensor of the graph, nor an earlier answer,
        has."""
        from tfopt.optimizer.graph.rewrite import unique_name

        name = unique_name(self._taken, base)
        self._taken.add(name)
        return name

    @cached_property
    def shapes(self) -> dict[str, tuple[Dim, ...]]:
        """Every tensor's symbolic shape, by ONNX Runtime's symbolic shape inference, which keeps
        one symbol per unknown dimension across the graph (the batch ``unk__0`` stays
        ``unk__0``, a flattened ``[batch * 20]`` is ``20*unk__0``). Computed on first use: only
        the rewrites that need shapes pay for it."""
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(self.model, auto_merge=True)
        if inferred is None:
            raise ValueError("symbolic shape inference gave up on the graph")
        graph = inferred.graph
        return {v.name: shape_of(v) for v in [*graph.input, *graph.value_info, *graph.output]
                if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}


def shape_of(value: onnx.ValueInfoProto) -> tuple[Dim, ...]:
    return tuple(d.dim_value if d.HasField("dim_value")
                 else (d.dim_param if d.HasField("dim_param") else None)
                 for d in value.type.tensor_type.shape.dim)


def attribute(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def rebuilt(model: onnx.ModelProto, replacements: Mapping[int, Sequence[onnx.NodeProto]],
            initializers: Iterable[onnx.TensorProto] = ()) -> onnx.ModelProto:
    """A copy of ``model`` whose node ``i`` is replaced by the nodes ``replacements[i]`` (none:
    removed), with ``initializers`` added. ``model`` is left as it was."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    nodes = []
    for index, node in enumerate(model.graph.node):
        nodes.extend(replacements.get(index, (node,)))
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    result.graph.initializer.extend(initializers)
    return result


def int64_tensor(name: str, values: Sequence[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def with_inputs(node: onnx.NodeProto, inputs: Sequence[str]) -> onnx.NodeProto:
    """A copy of ``node`` reading ``inputs`` (trailing omitted inputs dropped)."""
    inputs = list(inputs)
    while inputs and not inputs[-1]:
        inputs.pop()
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    del copy.input[:]
    copy.input.extend(inputs)
    return copy
