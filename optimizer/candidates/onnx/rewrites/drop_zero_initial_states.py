"""Recurrent ops' all-zero initial states -> omitted.

An ONNX ``LSTM``, ``GRU`` or ``RNN`` whose ``initial_h`` (input 5) or, for an LSTM,
``initial_c`` (input 6) is omitted starts from zeros. tf2onnx always passes them: Keras's
recurrent layers start from ``zeros([batch, units])``, which it writes as
``Expand(0, Concat(Slice(Shape(x)), [units]))``, then ``Unsqueeze`` and, for a bidirectional
layer, ``Concat`` of both directions: five to ten shape ops computed every call, and a state
tensor allocated and read, to say what omitting the input says.

Exact: the input is dropped only when its value is proven zero whatever the graph is fed, by
walking back through ops that keep zeros zeros (a zero constant, ``ConstantOfShape`` of zero,
``Expand``/``Tile``/``Reshape``/``Unsqueeze``/``Squeeze``/``Transpose``/``Identity``/``Cast`` of a
zero, ``Concat`` of zeros). A state any other way computed, or any non-zero element, is kept.
The state's shape is the op's ``[num_directions, batch, hidden_size]`` in a valid model, which
is the default's shape.
"""

from __future__ import annotations

import onnx

from tfopt.optimizer.candidates.onnx.rewrites.graph import (
    RECURRENT_OPS,
    GraphView,
    rebuilt,
    with_inputs,
)

STATE_INPUTS = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}
# ops whose output is all zeros when their first input is
_ZERO_PRESERVING = {"Expand", "Tile", "Reshape", "Unsqueeze", "Squeeze", "Transpose",
                    "Identity", "Cast", "Flatten"}


def is_zero(view: GraphView, name: str, depth: int = 0) -> bool:
    """``name`` holds only zeros, whatever the graph is fed."""
    if depth > 32:
        return False
    value = view.constant(name)
    if value is not None:
        return value.size > 0 and not value.any()
    node = view.node_of(name)
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "ConstantOfShape":
        value = None
        for a in node.attribute:
            if a.name == "value":
                value = onnx.numpy_helper.to_array(a.t)
        return value is None or not value.any()  # its default value is a float 0
    if node.op_type in _ZERO_PRESERVING:
        return is_zero(view, node.input[0], depth + 1)
    if node.op_type == "Concat":
        return all(is_zero(view, i, depth + 1) for i in node.input)
    return False


def drop_zero_initial_states(model: onnx.ModelProto) -> onnx.ModelProto:
    view = GraphView(model)
    replacements = {}
    for index, node in enumerate(view.nodes):
        if node.op_type not in RECURRENT_OPS or node.domain not in ("", "ai.onnx"):
            continue
        inputs = list(node.input)
        for position in STATE_INPUTS[node.op_type]:
            if position < len(inputs) and inputs[position] and is_zero(view, inputs[position]):
                inputs[position] = ""
        if inputs != list(node.input):
            replacements[index] = [with_inputs(node, inputs)]
    if not replacements:
        return model
    return rebuilt(model, replacements)
