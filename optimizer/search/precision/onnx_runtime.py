"""The precision search's view of a model in ONNX Runtime: its layers, their costs in int8 and
float, their sensitivity, and assignments built for real.

- **Layers**: the nodes of the pre-processed graph (what the ``static_int8`` flavour quantizes,
  :mod:`tfopt.optimizer.candidates.onnx.convert`) whose type ONNX Runtime's quantizer computes in int8
  (matrix products, convolutions, element-wise arithmetic, pooling, softmax, normalizations);
  the ops it only moves data through (reshapes, transposes) and the activations it folds into
  the preceding op's output range (Relu, Clip) follow their neighbours and are not searched.
- **Mixed models**: ``quantize_static`` with the float layers as ``nodes_to_exclude``, the
  activation ranges calibrated once and cached for every later build.
- **Costs** (:class:`OnnxLayerCosts`): each layer timed alone at batch 1 on one intra-op
  thread, as a one-node model in float and the same node quantized (its input quantize and
  output dequantize timed apart and taken off); each boundary as a QuantizeLinear and a
  DequantizeLinear of its tensor. A session call with nothing in it is taken off every figure.
  Timings are cached per machine by key (op type, input shapes, attributes, precision) in
  ``$TFOPT_PRECISION_COST_CACHE`` or ``~/.cache/tfopt/precision_costs.json``
  (:class:`~tfopt.optimizer.search.timing_cache.TimingCache`), so a second model with the same layer
  shapes, or a second search on the same model, times nothing.
- **Errors**: :mod:`tfopt.optimizer.search.precision.measure`, for every runtime.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tfopt.optimizer.search.precision.table import INPUT, OUTPUT
from tfopt.optimizer.search.timing_cache import TimingCache

log = logging.getLogger(__name__)

# ONNX Runtime's quantizer computes these in int8; the others it quantizes only move data, or
# (Relu, Clip) are folded into the preceding op's output range.
COMPUTE_OPS = frozenset({
    "Add", "ArgMax", "AveragePool", "BatchNormalization", "Concat", "Conv", "ConvTranspose",
    "CumSum", "EmbedLayerNormalization", "Gather", "GatherElements", "Gemm",
    "GlobalAveragePool", "InstanceNormalization", "LayerNormalization", "LeakyRelu", "MatMul",
    "MaxPool", "Mul", "Resize", "Sigmoid", "Softmax", "TopK", "Where"})
CACHE_VERSION = 1
TIMING_THREADS = 1
TIMING_RUNS = 200
TIMING_REPEATS = 5


def default_cache_path() -> Path:
    env = os.environ.get("TFOPT_PRECISION_COST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tfopt" / "precision_costs.json"


def _session(path_or_bytes, threads: int = TIMING_THREADS):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    source = str(path_or_bytes) if isinstance(path_or_bytes, Path) else path_or_bytes
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


class OnnxPrecisionModel:
    """A pre-processed float ONNX model and its calibration, from which any assignment's mixed
    model is built under ``work``."""

    suffix = ".onnx"
    format = "onnx"

    def __init__(self, prepared: bytes, feeds: Sequence[Mapping[str, np.ndarray]], work: Path):
        import onnx

        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.prepared = self.work / "prepared.onnx"
        self.prepared.write_bytes(prepared)
        self.feeds = [dict(f) for f in feeds]
        self.calibration_cache = self.work / "calibration_ranges.json"
        self.graph = onnx.load_model_from_string(prepared)
        self.layers = tuple(n.name for n in self.graph.graph.node if n.op_type in COMPUTE_OPS)
        self._built = 0

    def build(self, float_layers: Sequence[str] = (), only: Sequence[str] | None = None,
              dst: Path | None = None) -> Path:
        """The model with ``float_layers`` left in float (or only ``only`` quantized), written
        to ``dst`` (default: a fresh file under ``work``)."""
        from tfopt.optimizer.candidates.onnx.convert import quantize_static_int8

        self._built += 1
        dst = dst or self.work / f"assignment_{self._built}.onnx"
        _quiet_quantize(lambda: quantize_static_int8(
            self.prepared, dst, self.feeds, float_nodes=tuple(float_layers), only_nodes=only,
            calibration_cache=self.calibration_cache))
        return dst

    def edges(self) -> list[tuple[str, str, str]]:
        """(producer, consumer, tensor) between layers, through the ops that only move data or
        that the quantizer folds (a Relu between two matrix products joins them), and from the
        model's input and to its output."""
        graph = self.graph.graph
        producer = {out: node for node in graph.node for out in node.output}
        initializers = {i.name for i in graph.initializer}
        layers = set(self.layers)

        def source(tensor: str, seen=()) -> tuple[str, str] | None:
            node = producer.get(tensor)
            if node is None:
                return (INPUT, tensor) if tensor not in initializers and tensor else None
            if node.name in layers:
                return node.name, tensor
            if node.name in seen:
                return None
            found = [source(t, seen + (node.name,)) for t in node.input]
            found = [f for f in found if f is not None]
            return found[0] if found else None

        edges = []
        for node in graph.node:
            if node.name in layers:
                for tensor in node.input:
                    if (found := source(tensor)) is not None:
                        edges.append((found[0], node.name, found[1]))
        for output in graph.output:
            if (found := source(output.name)) is not None and found[0] != INPUT:
                edges.append((found[0], OUTPUT, found[1]))
        return list(dict.fromkeys(edges))


class OnnxLayerCosts:
    """Each layer's cost alone, in int8 and float, and each boundary's; timed once per machine
    and key, cached (see the module's docstring)."""

    def __init__(self, cache_path: str | os.PathLike | None = None):
        import onnxruntime as ort

        from tfopt.optimizer.system.cpu_features import cpu_model

        machine = (f"{cpu_model() or 'unknown cpu'}; {os.cpu_count()} cpus; onnxruntime "
                   f"{ort.__version__}; {TIMING_THREADS} thread(s)")
        self._cache = TimingCache(cache_path or default_cache_path(), CACHE_VERSION, machine,
                                  "precision cost")
        self._seconds = self._cache.load()
        self.timings = 0
        self._empty: float | None = None

    def table_costs(self, model: OnnxPrecisionModel, batch_size: int = 1
                    ) -> tuple[dict, dict, list[tuple[str, str, float]]]:
        """(int8 seconds, float seconds, edges with their boundary seconds)."""
        shaped = _with_batch(model.graph, batch_size)
        shapes = _tensor_shapes(shaped)
        initializers = {i.name: i for i in shaped.graph.initializer}
        int8, floats, boundary = {}, {}, {}
        for node in shaped.graph.node:
            if node.name not in model.layers:
                continue
            alone = _node_model(shaped, node, shapes, initializers)
            key = _node_key(node, shapes, initializers)
            floats[node.name] = self._cached(f"float:{key}", functools.partial(self._time, alone))
            io = _activations(node, initializers) + list(node.output[:1])
            io_cost = sum(self._boundary(shapes[t]) for t in io)
            int8[node.name] = max(0.0, self._cached(
                f"int8:{key}", functools.partial(self._time_quantized, alone)) - io_cost)
        edges = []
        for a, b, tensor in model.edges():
            if tensor not in boundary:
                boundary[tensor] = self._boundary(shapes[tensor]) if tensor in shapes else 0.0
            edges.append((a, b, boundary[tensor]))
        self._cache.save(self._seconds)
        return int8, floats, edges

    def _cached(self, key: str, measure) -> float:
        if key not in self._seconds:
            self._seconds[key] = measure()
            self.timings += 1
        return self._seconds[key]

    def _boundary(self, shape) -> float:
        """One quantize or dequantize of a float tensor of ``shape``: half a QuantizeLinear and
        DequantizeLinear pair."""
        dims, _ = shape
        return self._cached(f"boundary:{list(dims)}", lambda: self._time(_qdq_model(dims))) / 2

    def _time_quantized(self, alone) -> float:
        import tempfile

        import onnx

        from tfopt.optimizer.candidates.onnx.convert import quantize_static_int8

        rng = np.random.default_rng(0)
        feeds = [{i.name: _random(rng, _dims(i)) for i in alone.graph.input} for _ in range(8)]
        with tempfile.TemporaryDirectory(prefix="tfopt-precision-cost-") as work:
            src, dst = Path(work) / "float.onnx", Path(work) / "int8.onnx"
            onnx.save_model(alone, src)
            _quiet_quantize(lambda: quantize_static_int8(src, dst, feeds))
            return self._time(onnx.load(dst))

    def _time(self, model) -> float:
        """Seconds per call of ``model`` (fastest of a few repeats), less an empty call's."""
        if self._empty is None:
            self._empty = 0.0
            self._empty = self._time(_qdq_model((1,), empty=True))
        session = _session(model.SerializeToString())
        rng = np.random.default_rng(0)
        feeds = {i.name: _random(rng, _dims(i)) for i in model.graph.input}
        for _ in range(20):
            session.run(None, feeds)
        best = float("inf")
        for _ in range(TIMING_REPEATS):
            started = time.perf_counter()
            for _ in range(TIMING_RUNS):
                session.run(None, feeds)
            best = min(best, (time.perf_counter() - started) / TIMING_RUNS)
        return max(0.0, best - self._empty)


def _quiet_quantize(quantize) -> None:
    """``quantize()`` with ONNX Runtime's output captured to this module's log (its quantizer
    warns on the root logger at every call), a failure one :class:`ConversionError` line."""
    from tfopt.optimizer.candidates.conversion import run_converter

    run_converter(quantize, "cannot quantize for the precision search",
                  "ONNX Runtime static int8 (precision search)", ("onnxruntime", "root"))


def _dims(value_info) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value_info.type.tensor_type.shape.dim)


def _random(rng, dims) -> np.ndarray:
    return rng.standard_normal(dims).astype(np.float32)


def _with_batch(model, batch_size: int):
    """A copy with every unknown input dimension fixed (the batch to ``batch_size``) and the
    shapes inferred again."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.value_info[:]
    for value in list(copy.graph.input) + list(copy.graph.output):
        for index, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.dim_value:
                dim.Clear()
                dim.dim_value = batch_size if index == 0 else 1
    for value in copy.graph.output:
        value.type.tensor_type.ClearField("shape")
    return onnx.shape_inference.infer_shapes(copy)


def _tensor_shapes(model) -> dict[str, tuple[tuple[int, ...], int]]:
    values = list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output)
    return {v.name: (_dims(v), v.type.tensor_type.elem_type) for v in values
            if v.type.tensor_type.HasField("shape")}


def _node_key(node, shapes, initializers) -> str:
    parts = []
    for tensor in node.input:
        if tensor in initializers:
            parts.append(f"w{list(initializers[tensor].dims)}")
        elif tensor:
            parts.append(str(list(shapes.get(tensor, ((), 0))[0])))
    attrs = hashlib.sha1(b"".join(a.SerializeToString() for a in node.attribute)).hexdigest()
    return f"{node.op_type}({', '.join(parts)}){{{attrs[:12]}}}"


def _activations(node, initializers) -> list[str]:
    """The tensors ``node`` reads that are not weights, each once: a node may read one twice
    (a square as ``Mul(d, d)``, as TensorFlow's LayerNormalization converts), and a model
    with one graph input declared twice does not load."""
    return list(dict.fromkeys(t for t in node.input if t and t not in initializers))


def _node_model(model, node, shapes, initializers):
    """``node`` alone: its activations as the graph's inputs, its weights as initializers."""
    import onnx
    from onnx import helper

    inputs = [helper.make_tensor_value_info(t, shapes[t][1], shapes[t][0])
              for t in _activations(node, initializers)]
    outputs = [helper.make_tensor_value_info(t, shapes[t][1], shapes[t][0])
               for t in node.output if t in shapes]
    weights = [initializers[t] for t in node.input if t in initializers]
    copied = onnx.NodeProto()
    copied.CopyFrom(node)
    graph = helper.make_graph([copied], "alone", inputs, outputs, weights)
    return helper.make_model(graph, opset_imports=model.opset_import,
                             ir_version=model.ir_version)


def _qdq_model(dims, empty: bool = False):
    """A QuantizeLinear and a DequantizeLinear of a float tensor of ``dims`` (``empty``: an
    Identity, the cost of the call itself)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))
    if empty:
        nodes, weights = [helper.make_node("Identity", ["x"], ["y"])], []
    else:
        weights = [helper.make_tensor("scale", TensorProto.FLOAT, [], [0.05]),
                   helper.make_tensor("zero", TensorProto.INT8, [], [0])]
        nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
                 helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])]
    graph = helper.make_graph(nodes, "boundary", [x], [y], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
