"""Eight-bit ``MIN_FIRST`` quantization of constants, done offline the way TF's kernels do it.

The arithmetic follows ``FloatToQuantized<quint8>`` and ``QuantizedToFloat`` in
tensorflow/core/kernels/quantization_utils.h, so a quint8 ``Const`` written here and read back
by ``Dequantize(mode=MIN_FIRST)`` gives every value within half a step, ``(max - min) / 255 / 2``,
of the original. The range is GTT's: the constant's own min and max, widened to include 0.0
(not every quantized op handles a range without zero) and never empty.
"""

from __future__ import annotations

import numpy as np

from tfopt.optimizer.graph.rewrite import make_const

QUINT8_STEPS = 255  # distinct gaps between the 256 levels of an 8-bit value


def min_first_range(values: np.ndarray) -> tuple[float, float]:
    """GTT's quantization range for a constant: ``[min(values, 0), max(values, 0)]``."""
    lo = min(float(np.min(values)), 0.0)
    hi = max(float(np.max(values)), 0.0)
    if lo == hi:  # all zeros (or a scalar): the kernels need a non-empty range
        if abs(lo) < 1e-6:
            hi = lo + 1.0
        elif lo > 0:
            hi = 2.0 * lo
        else:
            hi = lo / 2.0
    return float(np.float32(lo)), float(np.float32(hi))


def step_size(lo: float, hi: float) -> float:
    """The value one quint8 level stands for in the range ``[lo, hi]``."""
    return (hi - lo) / QUINT8_STEPS


def _round_half_away_from_zero(values):
    # C++ std::round, which the kernels use; numpy's round is half-to-even.
    return np.sign(values) * np.floor(np.abs(values) + 0.5)


def quantize_min_first(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``values`` as quint8 levels (a uint8 array) over ``[lo, hi]``."""
    scale = 1.0 / step_size(lo, hi)
    levels = (_round_half_away_from_zero(np.asarray(values, np.float64) * scale)
              - _round_half_away_from_zero(lo * scale))
    return np.clip(levels, 0, QUINT8_STEPS).astype(np.uint8)


def dequantize_min_first(levels: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The float32 values ``Dequantize(mode=MIN_FIRST)`` reads back from quint8 ``levels``."""
    step = step_size(lo, hi)
    origin = _round_half_away_from_zero(lo / step) * step
    return (origin + np.asarray(levels, np.float64) * step).astype(np.float32)


def quint8_const(name: str, levels: np.ndarray, device: str = ""):
    """A ``Const`` of dtype quint8 holding ``levels``."""
    from tensorflow.python.framework import dtypes

    node = make_const(name, np.ascontiguousarray(levels, dtype=np.uint8), device)
    # quint8 and uint8 share the byte layout; only the declared dtype differs.
    node.attr["dtype"].type = dtypes.quint8.as_datatype_enum
    node.attr["value"].tensor.dtype = dtypes.quint8.as_datatype_enum
    return node


def quantized_const_nodes(name: str, values: np.ndarray, device: str = "",
                          control_inputs: list[str] | tuple[str, ...] = ()) -> list:
    """GTT's three constants for a float tensor: ``<name>_quantized_const`` (quint8) and the
    float scalars ``<name>_quantized_min`` / ``<name>_quantized_max``.

    ``control_inputs`` (the original constant's) go on all three, so that inside a while frame or
    a cond branch the new constants live where the original one did.
    """
    lo, hi = min_first_range(values)
    nodes = [
        quint8_const(f"{name}_quantized_const", quantize_min_first(values, lo, hi), device),
        make_const(f"{name}_quantized_min", np.array(lo, np.float32), device),
        make_const(f"{name}_quantized_max", np.array(hi, np.float32), device),
    ]
    for node in nodes:
        node.input.extend(control_inputs)
    return nodes


def dequantize_node(name: str, quantized: str, minimum: str, maximum: str, input_type,
                    device: str = ""):
    """``Dequantize(mode=MIN_FIRST)`` of ``quantized`` over ``[minimum, maximum]`` to float32.

    ``input_type`` is a tf DType: quint8 for a stored constant, qint32 for the output of a
    quantized Conv2D/MatMul.
    """
    from tensorflow.core.framework import node_def_pb2
    from tensorflow.python.framework import dtypes

    node = node_def_pb2.NodeDef(name=name, op="Dequantize", device=device,
                                input=[quantized, minimum, maximum])
    node.attr["T"].type = input_type.as_datatype_enum
    node.attr["mode"].s = b"MIN_FIRST"
    node.attr["dtype"].type = dtypes.float32.as_datatype_enum
    return node
