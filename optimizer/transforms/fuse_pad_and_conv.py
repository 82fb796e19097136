"""fuse_pad_and_conv: let the convolution do the padding a Pad or MirrorPad node does before it.

Two rewrites; in both the convolution keeps its name and the pad node goes, so the padded copy
of the input is never materialized.

**MirrorPad -> Conv2D becomes FusedPadConv2D** (GTT's fuse_pad_and_conv, fuse_convolutions.cc):
``MirrorPad`` (REFLECT or SYMMETRIC) feeding a ``Conv2D`` with ``padding=VALID`` or ``SAME``
becomes one ``FusedPadConv2D(input, paddings, filter)`` carrying the pad's ``mode`` and the
conv's ``T``, ``strides`` and ``padding``, as GTT builds it. TF 2.21 still registers its CPU
kernel (float32 only), but that kernel is narrower than GTT assumed, so this port adds checks
GTT lacks, each measured on TF 2.21:

- it computes every batch element from the first one (its row cache, ``end_cached_lines``, is
  not reset between batch elements): at batch 2 and up the outputs are wrong, not just slow.
  The pair is fused only when the MirrorPad's input has a static batch size of 1 (shape
  inference on the imported graph); GTT fuses regardless, and its result is wrong at batch > 1;
- it has no ``data_format``, ``dilations`` or EXPLICIT padding: an NCHW, dilated or
  EXPLICIT-padded Conv2D is left alone;
- it rejects, at run time, a batch or channel padding and a filter patch or input row band too
  large for its fixed scratch buffers (16 MiB im2col chunk, 8 MiB row cache): those pairs are
  left alone, which needs the height, width and depth of the input and the filter shape static;
- its paddings input is int32: int64 paddings are written as a new int32 ``Const``.

At batch 1 it matched MirrorPad + Conv2D with max |diff| 0 (eager probes: REFLECT and SYMMETRIC,
VALID and SAME, strides 1-3, images larger than its row cache). It is a memory saving, not
a speed-up, on x86: its im2col + Eigen GEMM measured 1.2-1.7x slower than MirrorPad + the oneDNN
Conv2D on 224x224x32 / 56x56x128 / 256x256x3 inputs, and one per-session scratch buffer with a
mutex serializes every FusedPadConv2D in a session.

**Zero Pad -> Conv2D becomes the conv's EXPLICIT padding** (a TF 2 extension; FusedPadConv2D's
``mode`` cannot express zero padding): ``Pad``/``PadV2`` with zero fill, padding only the
spatial axes, feeding a ``Conv2D`` with ``padding=VALID`` becomes that Conv2D with
``padding=EXPLICIT`` and the Pad's amounts as ``explicit_paddings`` (added to any it already
has, for an EXPLICIT one). Keras ``ZeroPadding2D`` before a ``valid`` Conv2D (ResNet's stem)
exports exactly this pattern. Any batch size works.

``DepthwiseConv2dNative`` also accepts EXPLICIT padding, but is deliberately not fused: on TF
2.21 with oneDNN (the x86 default), a graph with an EXPLICIT-padded DepthwiseConv2dNative
followed by a BiasAdd aborts the whole process when run in a session ("Check failed: index >= 0
&& index < num_total_dims" in tensor_format.h). Conv2D with EXPLICIT padding, alone or followed
by BiasAdd, FusedBatchNorm, Relu/Relu6/Elu/LeakyRelu or a residual add, runs and gives the same
outputs as Pad + VALID.

Preconditions for both, each checked; a pair that fails one is left as it is (debug log):
- the paddings (and PadV2's fill value, which must be 0) depend on constants only;
- the batch and channel axes are not padded (axes read from the conv's ``data_format``);
- the pad's output is read by the convolution only, and the pad is not an input, output or
  protected node.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from tfopt.optimizer.graph.const_eval import constant_subgraph, constant_values, is_pure
from tfopt.optimizer.graph.names import (
    is_control_input,
    node_name_from_input,
    output_index,
    tensor_name,
)
from tfopt.optimizer.graph.rewrite import (
    control_inputs,
    drop_nodes,
    make_const,
    only_reader,
    remove_unread,
    unique_name,
)
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)

_ZERO_PADS = frozenset({"Pad", "PadV2"})
MIRROR_PAD = "MirrorPad"
FUSED_PAD_CONV = "FusedPadConv2D"
# The conv paddings each rewrite can take over: EXPLICIT absorbs a zero Pad; FusedPadConv2D's
# ``padding`` attr accepts only SAME and VALID.
_ZERO_PAD_CONV_PADDINGS = (b"VALID", b"EXPLICIT")
_MIRROR_PAD_CONV_PADDINGS = (b"VALID", b"SAME")
_FUSED_PAD_CONV_ATTRS = ("T", "strides", "padding")
# FusedPadConv2D's scratch buffers (conv_ops_fused.cc, non-iOS): a filter patch must fit the
# im2col chunk, and filter-height rows of the mirrored input (all channels) the row cache.
_IM2COL_CHUNK_BYTES = 16 * 1024 * 1024
_ROW_CACHE_BYTES = 8 * 1024 * 1024
_FLOAT32_BYTES = 4


class FusePadAndConv(Transform):
    name = "fuse_pad_and_conv"
    params = ()

    def transform(self, graph_def, context: TransformContext):
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        memo: dict[str, bool] = {}
        pairs = [p for p in (self._match(node, by_name, readers, memo, context.boundary)
                             for node in graph_def.node if node.op == "Conv2D") if p]
        if not pairs:
            return graph_def
        values = constant_values(graph_def, [t for _, pad in pairs for t in _data(pad)[1:]],
                                 by_name)
        mirrored = [(conv, pad) for conv, pad in pairs if pad.op == MIRROR_PAD]
        shapes = _static_shapes(graph_def, [t for conv, pad in mirrored
                                            for t in (pad.input[0], conv.input[1])]) \
            if mirrored else {}

        removed: set[str] = set()
        leftovers: list[str] = []
        batch_unknown = 0
        for conv, pad in pairs:
            if pad.op == MIRROR_PAD:
                outcome = self._fuse_mirror_pad(graph_def, by_name, conv, pad, values, shapes)
                batch_unknown += outcome == "batch"
                fused = outcome == "fused"
            else:
                fused = self._fuse_zero_pad(conv, pad, values)
            if fused:
                removed.add(pad.name)
                leftovers.extend(node_name_from_input(i) for i in _data(pad)[1:])
        if batch_unknown:
            log.info("%s: left %d MirrorPad -> Conv2D pair(s) unfused: their batch size is not "
                     "known to be 1, and TF's FusedPadConv2D kernel computes every batch "
                     "element from the first", self.name, batch_unknown)
        if removed:
            drop_nodes(graph_def, removed)
        remove_unread(graph_def, leftovers, context.boundary, is_pure)
        return graph_def

    def _match(self, conv, by_name, readers, memo, boundary):
        if output_index(conv.input[0]) != 0:
            return None
        pad = by_name.get(node_name_from_input(conv.input[0]))
        if pad is None or (pad.op not in _ZERO_PADS and pad.op != MIRROR_PAD):
            return None
        padding = conv.attr["padding"].s if "padding" in conv.attr else b""
        takes = _MIRROR_PAD_CONV_PADDINGS if pad.op == MIRROR_PAD else _ZERO_PAD_CONV_PADDINGS
        if padding not in takes:
            log.debug("%s: leaving %s: a %s cannot be fused into a conv with padding=%s",
                      self.name, pad.name, pad.op, padding.decode())
            return None
        if only_reader(readers, pad.name) is not conv or pad.name in boundary:
            log.debug("%s: leaving %s: its output is needed elsewhere", self.name, pad.name)
            return None
        if not all(constant_subgraph(by_name, t, memo) is not None for t in _data(pad)[1:]):
            log.debug("%s: leaving %s: paddings or fill value not constant", self.name, pad.name)
            return None
        return conv, pad

    def _spatial_paddings(self, conv, pad, values) -> np.ndarray | None:
        """The pad's (4, 2) paddings when they leave the batch and channel axes alone."""
        paddings = np.asarray(values[_data(pad)[1]]).astype(np.int64)
        if paddings.shape != (4, 2):
            return None
        batch_and_channel = (0, 1) if _nchw(conv) else (0, 3)
        if np.any(paddings[list(batch_and_channel)] != 0):
            log.debug("%s: leaving %s: pads the batch or channel axis", self.name, pad.name)
            return None
        return paddings

    def _fuse_zero_pad(self, conv, pad, values) -> bool:
        if pad.op == "PadV2" and np.any(np.asarray(values[_data(pad)[2]]) != 0):
            log.debug("%s: leaving %s: fills with a non-zero value", self.name, pad.name)
            return False
        paddings = self._spatial_paddings(conv, pad, values)
        if paddings is None:
            return False
        # explicit_paddings lists (before, after) per axis in data_format order, which is the
        # order of the Pad's paddings rows since both describe the same tensor.
        total = paddings.reshape(-1)
        if conv.attr["padding"].s == b"EXPLICIT":
            already = np.asarray(conv.attr["explicit_paddings"].list.i, np.int64)
            if already.shape != total.shape:
                return False
            total = total + already
        conv.input[0] = pad.input[0]
        conv.attr["padding"].s = b"EXPLICIT"
        del conv.attr["explicit_paddings"].list.i[:]
        conv.attr["explicit_paddings"].list.i.extend(int(p) for p in total)
        conv.input.extend(i for i in control_inputs(pad) if i not in conv.input)
        log.debug("%s: fused %s into %s", self.name, pad.name, conv.name)
        return True

    def _fuse_mirror_pad(self, graph_def, by_name, conv, pad, values, shapes) -> str:
        """Rewrite ``conv`` as a FusedPadConv2D; "fused", "batch" (batch size not known to be
        1) or "skipped"."""
        from tensorflow.core.framework import attr_value_pb2, types_pb2

        why = None
        if pad.attr["mode"].s not in (b"REFLECT", b"SYMMETRIC"):
            why = f"mode {pad.attr['mode'].s.decode()} is not REFLECT or SYMMETRIC"
        elif conv.attr["T"].type != types_pb2.DT_FLOAT:
            why = "FusedPadConv2D has a float32 kernel only"
        elif _nchw(conv):
            why = "FusedPadConv2D has no data_format (NHWC only)"
        elif "dilations" in conv.attr and any(d != 1 for d in conv.attr["dilations"].list.i):
            why = "FusedPadConv2D has no dilations"
        if why:
            log.debug("%s: leaving %s: %s", self.name, pad.name, why)
            return "skipped"
        paddings = self._spatial_paddings(conv, pad, values)
        if paddings is None:
            return "skipped"
        image = shapes.get(tensor_name(pad.input[0]))
        if image is None or len(image) != 4 or image[0] != 1:
            log.debug("%s: leaving %s: input shape %s has no static batch size of 1", self.name,
                      pad.name, image)
            return "batch"
        filter_shape = shapes.get(tensor_name(conv.input[1]))
        if not _fits_scratch_buffers(image, paddings, filter_shape, conv):
            log.debug("%s: leaving %s: input %s / filter %s not known to fit FusedPadConv2D's "
                      "scratch buffers", self.name, pad.name, image, filter_shape)
            return "skipped"

        padding_input = _data(pad)[1]
        if pad.attr["Tpaddings"].type != types_pb2.DT_INT32:
            const = make_const(unique_name(by_name, f"{conv.name}/paddings"),
                               paddings.astype(np.int32), conv.device)
            graph_def.node.append(const)
            by_name[const.name] = const
            padding_input = const.name
        kept_attrs = {key: attr_value_pb2.AttrValue() for key in _FUSED_PAD_CONV_ATTRS}
        for key, value in kept_attrs.items():
            value.CopyFrom(conv.attr[key])
        inputs = [pad.input[0], padding_input, conv.input[1]]
        inputs += [i for i in control_inputs(conv, pad) if i not in inputs]
        conv.op = FUSED_PAD_CONV
        del conv.input[:]
        conv.input.extend(inputs)
        conv.ClearField("attr")
        for key, value in kept_attrs.items():
            conv.attr[key].CopyFrom(value)
        conv.attr["mode"].s = pad.attr["mode"].s
        log.debug("%s: fused %s into %s as %s", self.name, pad.name, conv.name, FUSED_PAD_CONV)
        return "fused"


def _data(node) -> list[str]:
    return [i for i in node.input if not is_control_input(i)]


def _nchw(conv) -> bool:
    return "data_format" in conv.attr and conv.attr["data_format"].s == b"NCHW"


def _static_shapes(graph_def, tensors) -> dict[str, tuple | None]:
    """``node:index -> static shape`` (None dims unknown) from shape inference on import."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
    except (ValueError, tf.errors.OpError) as exc:
        log.debug("fuse_pad_and_conv: no static shapes, the graph does not import: %s", exc)
        return {}
    shapes = {}
    for tensor in tensors:
        shape = graph.get_tensor_by_name(tensor_name(tensor)).shape
        shapes[tensor_name(tensor)] = None if shape.rank is None else tuple(shape.as_list())
    return shapes


def _fits_scratch_buffers(image, paddings, filter_shape, conv) -> bool:
    """True when FusedPadConv2D's fixed buffers hold this conv's filter patch and row band."""
    if filter_shape is None or len(filter_shape) != 4 or None in image[1:] \
            or None in filter_shape[:3]:
        return False
    depth = image[3]
    filter_height, filter_width = filter_shape[0], filter_shape[1]
    stride = conv.attr["strides"].list.i[2]
    padded_width = image[2] + int(paddings[2].sum())
    if conv.attr["padding"].s == b"VALID":
        out_width = math.ceil((padded_width - filter_width + 1) / stride)
    else:
        out_width = math.ceil(padded_width / stride)
    if out_width <= 0:
        return False
    band_width = (out_width - 1) * stride + filter_width
    patch = filter_height * filter_width * depth * _FLOAT32_BYTES
    band = filter_height * band_width * depth * _FLOAT32_BYTES
    return patch <= _IM2COL_CHUNK_BYTES and band <= _ROW_CACHE_BYTES
