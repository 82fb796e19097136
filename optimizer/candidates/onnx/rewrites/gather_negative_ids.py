"""tf2onnx's negative-index fix-up before a ``Gather`` from a constant -> the ids go straight in.

Keras's ``Embedding`` (and TensorFlow's ``gather`` users like it) writes
``SelectV2(ids < 0, ids + n, ids)`` before gathering rows of an ``n``-row table, so that
negative ids count from the end. tf2onnx lowers the select to arithmetic, as ONNX Runtime's
``Where`` was slow: ``Add(Mul(Cast(c), ids + n), Mul(ids, Cast(Not(c))))`` with
``c = Less(Cast(ids, float), 0)``: eight element-wise ops on every call. The ``Where`` form
(``Where(c, ids + n, ids)``) is matched too.

Exact: ONNX's ``Gather`` takes negative indices in ``[-n, n-1]`` itself, counting from the end
of the gathered axis, as the select does. Any other id is out of range for both graphs (the
select maps ``ids < -n`` to a negative index below ``-n``), and ONNX Runtime refuses both. So
the rewrite applies only when the gathered data is a constant whose ``axis`` has ``n`` rows, the
added constant is that ``n``, and the condition is ``ids < 0`` (``Less`` against a zero, of the
ids or of a ``Cast`` of them, which keeps their sign). Anything else (another constant, ``<=``,
a comparison with another value, data computed at run time) is left alone.
"""

from __future__ import annotations

import onnx

from tfopt.optimizer.candidates.onnx.rewrites.graph import (
    GraphView,
    attribute,
    rebuilt,
    with_inputs,
)


def _through_cast(view: GraphView, name: str) -> str:
    cast = view.produced_by(name, "Cast")
    return cast.input[0] if cast is not None else name


def _is_negative_test(view: GraphView, condition: str, ids: str) -> bool:
    """``condition`` is ``ids < 0`` (ids maybe cast: a cast of an integer keeps its sign)."""
    less = view.produced_by(condition, "Less")
    if less is None or _through_cast(view, less.input[0]) != ids:
        return False
    zero = view.constant(less.input[1])
    return zero is not None and zero.ndim == 0 and zero.item() == 0


def _is_plus(view: GraphView, name: str, ids: str, n: int) -> bool:
    """``name`` is ``ids + n`` with ``n`` a scalar constant."""
    add = view.produced_by(name, "Add")
    if add is None:
        return False
    for a, b in (add.input, reversed(add.input)):
        value = view.constant(b)
        if a == ids and value is not None and value.ndim == 0 and value.item() == n:
            return True
    return False


def _select_inputs(view: GraphView, name: str) -> tuple[str, str, str] | None:
    """``(condition, if_true, if_false)`` when ``name`` is a select tf2onnx wrote."""
    where = view.produced_by(name, "Where")
    if where is not None:
        return tuple(where.input)
    add = view.produced_by(name, "Add")
    if add is None:
        return None
    for first, second in (add.input, reversed(add.input)):
        taken, dropped = view.produced_by(first, "Mul"), view.produced_by(second, "Mul")
        if taken is None or dropped is None:
            continue
        for cast, if_true in (taken.input, reversed(taken.input)):
            positive = view.produced_by(cast, "Cast")
            if positive is None:
                continue
            for negative_cast, if_false in (dropped.input, reversed(dropped.input)):
                negative = view.produced_by(negative_cast, "Cast")
                not_ = negative and view.produced_by(negative.input[0], "Not")
                if not_ is not None and not_.input[0] == positive.input[0]:
                    return positive.input[0], if_true, if_false
    return None


def gather_negative_ids(model: onnx.ModelProto) -> onnx.ModelProto:
    view = GraphView(model)
    replacements = {}
    for index, node in enumerate(view.nodes):
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx"):
            continue
        shape = view.constant_shape(node.input[0])
        select = _select_inputs(view, node.input[1])
        if shape is None or select is None:
            continue
        axis = attribute(node, "axis", 0)
        if not -len(shape) <= axis < len(shape):
            continue
        condition, if_true, ids = select
        if _is_negative_test(view, condition, ids) and _is_plus(view, if_true, ids,
                                                                 shape[axis]):
            replacements[index] = [with_inputs(node, [node.input[0], ids])]
    return rebuilt(model, replacements) if replacements else model
