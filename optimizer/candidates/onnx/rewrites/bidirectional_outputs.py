"""A bidirectional recurrent op's output taken apart and joined again -> one ``Transpose`` and a
``Reshape``.

An ONNX ``LSTM``/``GRU``/``RNN`` with ``direction="bidirectional"`` gives ``Y`` as
``[time, 2, batch, hidden]``. Keras's ``Bidirectional`` wants ``[time, batch, 2 * hidden]``,
the forward step's features then the backward one's, and tf2onnx writes it as it took the layers
apart: ``Slice`` of each direction, ``Squeeze`` of that axis, ``Concat`` on the last. Five ops,
two intermediate copies. ``Transpose(Y, [0, 2, 1, 3])`` gives ``[time, batch, 2, hidden]``,
whose row-major layout is exactly the concatenation, and ``Reshape(., [0, 0, 2 * hidden])``
names it so: one copy. When the concatenation's one reader swaps its first two axes (a
``Transpose`` with ``perm [1, 0, 2]``, Keras going back to batch-major), that transpose is
folded in: ``Transpose(Y, [2, 0, 1, 3])`` then the same ``Reshape``.

Exact: both are data movement, element for element the same (the ``Reshape``'s ``0`` copies a
size, so an empty batch reshapes too). Only ``Y`` of a ``layout=0`` op matches, sliced to
direction 0 and to direction 1 on axis 1, each squeezed on axis 1, joined on the last axis
forward first; another axis, another order, or anything else between, is left alone.
"""

from __future__ import annotations

import onnx
from onnx import helper

from tfopt.optimizer.candidates.onnx.rewrites.graph import (
    RECURRENT_OPS,
    GraphView,
    attribute,
    int64_tensor,
    rebuilt,
)

_Y_RANK = 4  # [time, num_directions, batch, hidden]


def _axes(view: GraphView, node: onnx.NodeProto, position: int) -> list[int] | None:
    """A ``Squeeze``'s or ``Slice``'s axes (input ``position``, or the pre-opset-13
    attribute), normalized for ``Y``'s rank."""
    if len(node.input) > position and node.input[position]:
        value = view.constant(node.input[position])
        if value is None:
            return None
        axes = value.reshape(-1).tolist()
    else:
        axes = attribute(node, "axes")
        if axes is None:
            return None
    return [a % _Y_RANK for a in axes]


def _direction(view: GraphView, name: str) -> tuple[onnx.NodeProto, int] | None:
    """``(recurrent op, direction)`` when ``name`` is ``Squeeze(Slice(Y, d:d+1, axis 1), 1)``."""
    squeeze = view.produced_by(name, "Squeeze")
    squeezed = squeeze and _axes(view, squeeze, 1)
    slice_ = squeeze and view.produced_by(squeeze.input[0], "Slice")
    if squeezed != [1] or slice_ is None or len(slice_.input) < 4:
        return None
    recurrent = view.node_of(slice_.input[0])
    if recurrent is None or recurrent.op_type not in RECURRENT_OPS or \
            recurrent.output[0] != slice_.input[0] or \
            attribute(recurrent, "direction", b"forward") != b"bidirectional" or \
            attribute(recurrent, "layout", 0) != 0:
        return None
    starts, ends = view.constant(slice_.input[1]), view.constant(slice_.input[2])
    steps = view.constant(slice_.input[4]) if len(slice_.input) > 4 and slice_.input[4] \
        else None
    if starts is None or ends is None or starts.size != 1 or ends.size != 1 or \
            _axes(view, slice_, 3) != [1] or (steps is not None and steps.tolist() != [1]):
        return None
    # the Slice's bounds on an axis of 2: negative ones count from the end, ends clamp to 2
    start, end = (int(v.reshape(())) for v in (starts, ends))
    start, end = start + 2 if start < 0 else start, min(end + 2 if end < 0 else end, 2)
    if start not in (0, 1) or end != start + 1:
        return None
    return recurrent, start


def bidirectional_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    view = GraphView(model)
    replacements, initializers = {}, []
    for index, concat in enumerate(view.nodes):
        if concat.op_type != "Concat" or concat.domain not in ("", "ai.onnx") or \
                len(concat.input) != 2 or attribute(concat, "axis") not in (2, -1):
            continue
        forward, backward = (_direction(view, name) for name in concat.input)
        if forward is None or backward is None or forward[0] is not backward[0] or \
                (forward[1], backward[1]) != (0, 1):
            continue
        recurrent = forward[0]
        hidden = attribute(recurrent, "hidden_size")
        if hidden is None:
            continue
        perm, last = [0, 2, 1, 3], concat
        reader = next(iter(view.consumers.get(concat.output[0], [])), None)
        if reader is not None and view.only_reader(concat.output[0], reader) and \
                reader.op_type == "Transpose" and attribute(reader, "perm") == [1, 0, 2]:
            perm, last = [2, 0, 1, 3], reader
        transposed = view.unique_name(f"{concat.output[0]}__transposed")
        shape = view.unique_name(f"{concat.output[0]}__shape")
        initializers.append(int64_tensor(
            shape, [0, 0, 2 * hidden]))
        replacements[view.index_of(last)] = [
            helper.make_node("Transpose", [recurrent.output[0]], [transposed],
                             name=view.unique_name(f"{last.name}__transpose"), perm=perm),
            helper.make_node("Reshape", [transposed, shape], list(last.output),
                             name=last.name)]
    return rebuilt(model, replacements, initializers) if replacements else model
