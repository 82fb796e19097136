"""A ``Reshape`` whose target shape is computed at run time -> the same ``Reshape`` with a
constant target shape, when symbolic shapes prove what it is.

tf2onnx writes TensorFlow's dynamic shapes as they were computed: ``Shape``, ``Gather``,
``ReduceProd``, ``Concat``, ``Cast`` feeding a ``Reshape``, every call. ONNX Runtime folds none
of it when the batch dimension is unknown. ONNX Runtime's symbolic shape inference gives each
unknown dimension one symbol across the graph, so the ``Reshape``'s output shape is often known
up to the batch: ``[unk__0, 20, 10]``. The target becomes a constant:

- a static size stays;
- a symbolic size equal to the input's size at the same position (the same symbol) becomes
  ``0``, "copy the input's size" (only when the ``Reshape`` has no ``allowzero``);
- one other symbolic size becomes ``-1``, "whatever is left", but only when every other size is
  static and not zero, so that the division it implies is never by zero (an empty batch too).

Exact: the target is the shape the computation produced on every input, by the symbols' meaning.
A target with two sizes neither static nor copied (``[a, b]`` from ``[a*b*c]``), a static size
``0``, or an unknown size, is left alone, as is a target already constant.
"""

from __future__ import annotations

import onnx

from tfopt.optimizer.candidates.onnx.rewrites.graph import (
    Dim,
    GraphView,
    attribute,
    int64_tensor,
    rebuilt,
    with_inputs,
)


def constant_target(input_shape: tuple[Dim, ...] | None, output_shape: tuple[Dim, ...] | None,
                    allowzero: bool) -> list[int] | None:
    """The constant ``Reshape`` target giving ``output_shape`` from ``input_shape``, or None."""
    if output_shape is None or any(d is None or d == 0 for d in output_shape):
        return None
    target: list[int] = []
    for position, dim in enumerate(output_shape):
        if isinstance(dim, int):
            target.append(dim)
        elif not allowzero and input_shape is not None and position < len(input_shape) \
                and input_shape[position] == dim:
            target.append(0)
        else:
            target.append(-1)
    if target.count(-1) > 1 or (-1 in target and 0 in target):
        return None
    return target


def constant_reshape_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    view = GraphView(model)
    computed = [(i, n) for i, n in enumerate(view.nodes)
                if n.op_type == "Reshape" and n.domain in ("", "ai.onnx") and len(n.input) == 2
                and view.constant(n.input[1]) is None]
    if not computed:
        return model  # no shape inference for a graph with nothing to gain
    replacements, initializers = {}, []
    for index, node in computed:
        target = constant_target(view.shapes.get(node.input[0]),
                                 view.shapes.get(node.output[0]),
                                 bool(attribute(node, "allowzero", 0)))
        if target is None:
            continue
        name = view.unique_name(f"{node.output[0]}__shape")
        initializers.append(int64_tensor(name, target))
        replacements[index] = [with_inputs(node, [node.input[0], name])]
    return rebuilt(model, replacements, initializers) if replacements else model
