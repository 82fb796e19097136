"""Tiny ONNX graphs built by hand for the rewrite tests, run before and after with ONNX Runtime.

The rewrites are exact: they reorganize data movement and shape bookkeeping, never arithmetic,
so the rewritten graph's outputs must equal the original's bit for bit (tolerance 0)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 15  # tf2onnx's default, as the real conversions use
BATCHES = (1, 3, 5)  # batch 1 and larger ones: the batch is a symbol to the rewrites


def const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
          outputs: Sequence[str], initializers: Iterable[onnx.TensorProto] = (),
          opset: int = OPSET) -> onnx.ModelProto:
    """A model; outputs are declared float32 of unknown shape unless told otherwise (ONNX
    Runtime, loading it, checks the graph)."""
    declared = [o if isinstance(o, onnx.ValueInfoProto)
                else helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph(list(nodes), "test", list(inputs), declared, list(initializers))
    result = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    result.ir_version = 8
    return result


def run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(m.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_same_outputs(original: onnx.ModelProto, rewritten: onnx.ModelProto,
                        feeds: Iterable[dict[str, np.ndarray]]) -> None:
    """Both graphs give identical outputs (tolerance 0) on every feed."""
    count = 0
    for feed in feeds:
        for before, after in zip(run(original, feed), run(rewritten, feed), strict=True):
            assert before.shape == after.shape and before.dtype == after.dtype
            np.testing.assert_array_equal(after, before)
        count += 1
    assert count


def ops(m: onnx.ModelProto) -> Counter:
    return Counter(node.op_type for node in m.graph.node)


def floats(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def float_input(name: str, shape: Sequence[int | str | None]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def batch_feeds(name: str, shape: Sequence[int | None]) -> list[dict[str, np.ndarray]]:
    """One float feed of ``shape`` per batch size of :data:`BATCHES` (``None`` marks the batch
    axis)."""
    return [{name: floats(*(batch if d is None else d for d in shape), seed=batch)}
            for batch in BATCHES]


def zeros_like_batch(x: str, batch_axis: int, size: int, out: str) -> list[onnx.NodeProto]:
    """tf2onnx's ``zeros([batch, size])``: ``Expand(0, Concat(Slice(Shape(x)), [size]))``.
    Needs the initializers of :func:`zeros_initializers`."""
    return [
        helper.make_node("Shape", [x], [f"{out}_shape"]),
        helper.make_node("Slice", [f"{out}_shape", f"start_{batch_axis}",
                                   f"start_{batch_axis + 1}"], [f"{out}_batch"]),
        helper.make_node("Concat", [f"{out}_batch", f"size_{size}"], [f"{out}_dims"], axis=0),
        helper.make_node("Expand", ["zero", f"{out}_dims"], [out]),
    ]


def zeros_initializers(*sizes: int, zero: float = 0.0) -> list[onnx.TensorProto]:
    return [const("zero", np.float32(zero)), *(const(f"start_{i}", np.array([i], np.int64))
                                               for i in range(3)),
            *(const(f"size_{s}", np.array([s], np.int64)) for s in sizes)]
