"""quantize_nodes: run Conv2D and MatMul as eight-bit ops, but only if that is faster here.

GTT's quantize_nodes (quantize_nodes.cc) replaced float ops by ``Quantized*`` kernels wrapped in
Quantize/Dequantize. This keeps its scheme for the two ops that carry the arithmetic: the float
activation is quantized in the graph (``QuantizeV2``, mode ``MIN_FIRST``, its range from
``Min``/``Max`` reductions over the flattened tensor, nodes named ``<op>_eightbit/<input>/...``
as GTT does); the weight constant is quantized offline (GTT's ``<weight>_quantized_const``
triple, or reused as is when quantize_weights already made one); ``QuantizedConv2D`` /
``QuantizedMatMul`` (``<op>/eightbit``) compute in 32-bit and a ``Dequantize`` that takes the
original name turns the result back into float32. GTT requantized the 32-bit result to 8 bits
for a following eight-bit op; with only these two ops quantized, nothing would read the 8 bits,
so this dequantizes the 32-bit result directly (one kernel less, and more exact).

Why it refuses by default: the old quantized kernels (gemmlowp, no oneDNN) are slower than TF's
float path on x86 — a published study measured GTT's 8-bit graphs 2.7x-3.3x slower, and TF
issues #2807 and #13939 report the same. So the transform times the float and the 8-bit graph
in this process (interleaved runs on generated inputs, median) and raises ``TransformRefused``
with both medians unless the 8-bit graph is at least ``min_speedup`` times faster. ``force``
skips the measurement, for experiments. Measured where this was written (TF 2.21, two shared x86
cores with AVX512-VNNI), batch 8: keras_cnn 1.2-3.1x slower, a 56x56x64 3x3 Conv2D 2.1-4.4x, a
1024x1024 MatMul about 5x.

Preconditions: a frozen graph (weights are Consts, possibly behind Identity). Left alone:
nodes in the boundary, non-float ops, a MatMul whose constant is not its second input,
Conv2D in NCHW, with dilations, unequal row/column strides or explicit padding (the quantized
kernel does not implement them), and ops named in ``ignore_op``. Numerics: 8-bit activations
and weights; outputs move by up to about a step of each (range / 255) times the dot-product
length, so check the result with the equivalence report.
"""

from __future__ import annotations

import logging

from tfopt.optimizer.errors import InvalidInputsError, first_line
from tfopt.optimizer.graph.consts import (
    PASS_THROUGH_OPS,
    resolve_through_identity,
    values_from_const,
)
from tfopt.optimizer.graph.names import canonical_input, is_control_input, node_name_from_input
from tfopt.optimizer.graph.quantization import dequantize_node, quantized_const_nodes
from tfopt.optimizer.graph.rewrite import control_inputs, make_const, remove_unread
from tfopt.optimizer.graph.traversal import nodes_by_name
from tfopt.optimizer.transforms.base import Param, Transform, TransformContext, TransformRefused
from tfopt.optimizer.transforms.timing import median_run_seconds, placeholder_feeds

log = logging.getLogger(__name__)

QUANTIZABLE_OPS = ("Conv2D", "MatMul")

# Enough to see a 2x difference through the noise of a shared machine while keeping the
# decision well under a second for small models.
TIMING_RUNS = 15
TIMING_WARMUP = 3
TIMING_BATCH = 8


def _unique_node_name_from_input(input_name: str) -> str:
    """GTT's UniqueNodeNameFromInput: ``^a`` -> ``__hat__a``, ``a:1`` -> ``a__port__1``."""
    prefix = "__hat__" if is_control_input(input_name) else ""
    name = node_name_from_input(input_name)
    tail = input_name.rpartition(":")[2] if ":" in input_name else ""
    return f"{prefix}{name}" + (f"__port__{tail}" if tail.isdigit() and tail != "0" else "")


def _attr(node, key: str, kind: str, default):
    """``node.attr[key].<kind>``, or ``default`` when the attr is absent (stripped defaults);
    reading a missing key through ``node.attr[key]`` would add an empty one to the node."""
    return getattr(node.attr[key], kind) if key in node.attr else default


def _node(name: str, op: str, inputs: list[str], device: str = ""):
    from tensorflow.core.framework import node_def_pb2

    return node_def_pb2.NodeDef(name=name, op=op, input=inputs, device=device)


class QuantizeNodes(Transform):
    name = "quantize_nodes"
    params = (
        Param("force", bool, False, "skip the speed check and always rewrite (experiments)"),
        Param("min_speedup", float, 1.0,
              "refuse unless fp32 median / 8-bit median is at least this"),
        Param("ignore_op", str, (), "float op type to leave alone, e.g. MatMul", repeated=True),
    )

    def transform(self, graph_def, context: TransformContext):
        quantized, rewritten = self._rewrite(graph_def, context)
        if not rewritten:
            log.debug("quantize_nodes: no Conv2D/MatMul with a constant weight to quantize")
            return graph_def
        if self["force"]:
            log.info("quantize_nodes: %d op(s) quantized without a speed check (force=true)",
                     len(rewritten))
            return quantized
        float_p50, eight_bit_p50 = self._measure(graph_def, quantized, context)
        speedup = float_p50 / eight_bit_p50
        times = f"(p50 {eight_bit_p50 * 1e3:.2f} ms 8-bit vs {float_p50 * 1e3:.2f} ms fp32)"
        if speedup < self["min_speedup"]:
            if speedup < 1.0:
                verdict = f"the 8-bit graph is {1 / speedup:.2f}x slower than fp32 here {times}"
            else:
                verdict = (f"the 8-bit graph is only {speedup:.2f}x faster than fp32 here "
                           f"{times}, below min_speedup={self['min_speedup']:g}")
            raise TransformRefused(
                f"quantize_nodes refused: {verdict}; use the int8 candidates instead")
        log.info("quantize_nodes: the 8-bit graph is %.2fx faster than fp32 here %s",
                 speedup, times)
        return quantized

    def _measure(self, float_graph, eight_bit_graph, context) -> tuple[float, float]:
        try:
            feeds = placeholder_feeds(float_graph, context.input_names, TIMING_BATCH)
        except InvalidInputsError as exc:
            raise TransformRefused(
                f"quantize_nodes refused: cannot time the graphs: {exc}") from None
        from tfopt.optimizer.tf_runtime import import_tensorflow

        tf = import_tensorflow()
        try:
            float_p50, eight_bit_p50 = median_run_seconds(
                [float_graph, eight_bit_graph], feeds, list(context.output_names),
                runs=TIMING_RUNS, warmup=TIMING_WARMUP)
        except (ValueError, tf.errors.OpError) as exc:  # e.g. a quantized kernel missing here
            first = first_line(exc)
            raise TransformRefused(
                f"quantize_nodes refused: the 8-bit graph does not run here: {first}") from None
        return float_p50, eight_bit_p50

    # -- the rewrite -------------------------------------------------------------------------

    def _rewrite(self, graph_def, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        by_name = nodes_by_name(graph_def)
        taken = set(by_name)
        result = graph_pb2.GraphDef()
        result.CopyFrom(graph_def)  # versions, library: everything but the nodes stays as is
        del result.node[:]
        rewritten, weight_inputs = [], []
        quantized_weights: dict[str, tuple[str, str, str]] = {}  # float Const -> its 8-bit triple
        for node in graph_def.node:
            reason = self._reason_to_skip(node, context)
            weight = None if reason else self._eight_bit_weight(node, by_name, taken,
                                                                 quantized_weights)
            if reason or isinstance(weight, str):
                if node.op in QUANTIZABLE_OPS:
                    log.debug("quantize_nodes: %s left float: %s", node.name, reason or weight)
                result.node.add().CopyFrom(node)
                continue
            weight_tensors, new_weight_nodes = weight
            result.node.extend(new_weight_nodes)
            taken.update(n.name for n in new_weight_nodes)
            result.node.extend(self._quantized_op(node, weight_tensors))
            rewritten.append(node.name)
            weight_inputs.append(node_name_from_input(node.input[1]))
        # The float weights (and their Identity wrappers) nothing reads any more.
        remove_unread(result, weight_inputs, context.boundary,
                      lambda n: n.op in PASS_THROUGH_OPS or n.op in ("Const", "Dequantize"))
        return result, rewritten

    def _reason_to_skip(self, node, context: TransformContext) -> str | None:
        from tensorflow.core.framework import types_pb2

        if node.op not in QUANTIZABLE_OPS:
            return "not a Conv2D or MatMul"
        if node.op in self["ignore_op"]:
            return "op listed in ignore_op"
        if node.name in context.boundary:
            return "in the graph's boundary"
        if _attr(node, "T", "type", None) != types_pb2.DT_FLOAT:
            return "not float32"
        if node.op == "Conv2D":
            strides = list(node.attr["strides"].list.i) if "strides" in node.attr else []
            dilations = list(node.attr["dilations"].list.i) if "dilations" in node.attr else []
            if _attr(node, "data_format", "s", b"NHWC") not in (b"", b"NHWC"):
                return "QuantizedConv2D is NHWC only"
            if any(d != 1 for d in dilations):
                return "QuantizedConv2D ignores dilations"
            if _attr(node, "padding", "s", b"") not in (b"SAME", b"VALID"):
                return "QuantizedConv2D supports SAME and VALID padding only"
            if len(strides) != 4 or strides[0] != 1 or strides[3] != 1 \
                    or strides[1] != strides[2]:
                return "QuantizedConv2D needs equal row/column strides"
        return None

    def _eight_bit_weight(self, node, by_name: dict, taken: set, quantized_weights: dict):
        """``((quantized, min, max) tensor names, new nodes)`` for the weight, or a reason."""
        from tensorflow.core.framework import types_pb2

        source = resolve_through_identity(by_name, node.input[1])
        if source is not None and source.op == "Dequantize" \
                and _attr(source, "T", "type", None) == types_pb2.DT_QUINT8 \
                and _attr(source, "mode", "s", b"MIN_COMBINED") == b"MIN_FIRST" \
                and len(source.input) >= 3:
            return tuple(source.input[:3]), []  # already 8-bit (quantize_weights)
        if source is None or source.op != "Const" \
                or _attr(source, "dtype", "type", None) != types_pb2.DT_FLOAT:
            return "the weight is not a float constant"
        if source.name in quantized_weights:  # another op sharing this weight did it already
            return quantized_weights[source.name], []
        names = tuple(f"{source.name}_quantized_{s}" for s in ("const", "min", "max"))
        clash = [n for n in names if n in taken]
        if clash:
            return f"a node named {clash[0]} already exists"
        quantized_weights[source.name] = names
        return names, quantized_const_nodes(source.name, values_from_const(source),
                                            source.device, control_inputs(source))

    def _quantized_op(self, node, weight: tuple[str, str, str]) -> list:
        from tensorflow.python.framework import dtypes

        activation = node.input[0]
        prefix = f"{node.name}_eightbit/{_unique_node_name_from_input(activation)}"
        # Control edges from the activation put these constants in its while frame / branch.
        anchor = "^" + node_name_from_input(activation)
        reshape_dims = make_const(f"{prefix}/reshape_dims", _int32([-1]), node.device)
        reduction_dims = make_const(f"{prefix}/reduction_dims", _int32([0]), node.device)
        reshape_dims.input.append(anchor)
        reduction_dims.input.append(anchor)
        reshape = _node(f"{prefix}/reshape", "Reshape", [activation, reshape_dims.name],
                        node.device)
        reshape.attr["T"].type = dtypes.float32.as_datatype_enum
        reshape.attr["Tshape"].type = dtypes.int32.as_datatype_enum
        reductions = []
        for op in ("Min", "Max"):
            reduce = _node(f"{prefix}/{op.lower()}", op, [reshape.name, reduction_dims.name],
                           node.device)
            reduce.attr["T"].type = dtypes.float32.as_datatype_enum
            reduce.attr["Tidx"].type = dtypes.int32.as_datatype_enum
            reduce.attr["keep_dims"].b = False
            reductions.append(reduce)
        quantize = _node(f"{prefix}/quantize", "QuantizeV2",
                         [activation, reductions[0].name, reductions[1].name], node.device)
        quantize.attr["T"].type = dtypes.quint8.as_datatype_enum
        quantize.attr["mode"].s = b"MIN_FIRST"

        q = quantize.name
        main = _node(f"{node.name}/eightbit", f"Quantized{node.op}",
                     [q, canonical_input(weight[0]), f"{q}:1", f"{q}:2",
                      canonical_input(weight[1]), canonical_input(weight[2])], node.device)
        main.input.extend(control_inputs(node))
        if node.op == "Conv2D":
            for attr in ("strides", "padding", "dilations"):
                if attr in node.attr:
                    main.attr[attr].CopyFrom(node.attr[attr])
            main.attr["Tinput"].type = dtypes.quint8.as_datatype_enum
            main.attr["Tfilter"].type = dtypes.quint8.as_datatype_enum
            main.attr["out_type"].type = dtypes.qint32.as_datatype_enum
        else:
            for attr in ("transpose_a", "transpose_b"):
                main.attr[attr].b = _attr(node, attr, "b", False)
            main.attr["T1"].type = dtypes.quint8.as_datatype_enum
            main.attr["T2"].type = dtypes.quint8.as_datatype_enum
            main.attr["Toutput"].type = dtypes.qint32.as_datatype_enum
        back_to_float = dequantize_node(node.name, main.name, f"{main.name}:1",
                                        f"{main.name}:2", dtypes.qint32, node.device)
        return [reshape_dims, reduction_dims, reshape, *reductions, quantize, main, back_to_float]


def _int32(values):
    import numpy as np

    return np.array(values, dtype=np.int32)
