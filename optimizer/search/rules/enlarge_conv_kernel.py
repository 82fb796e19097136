"""enlarge_conv_kernel: zero-pad a Conv2D's constant filter to a sibling conv's larger kernel.

Matches a Conv2D with a constant ``k1 x k2`` filter when a sibling Conv2D reads the same input
tensor with a larger ``K1 x K2`` constant filter and otherwise identical attributes (strides,
dtype, data_format NHWC, dilations 1, padding SAME on both). The rewrite replaces the filter by a
``K1 x K2`` one holding the original weights at the offset that makes every output read the same
input pixels, zeros elsewhere; the conv keeps its name. Alone this is slower (more
multiply-adds); it is the enabling step that lets merge_parallel_convs merge the two convs.

Why it is exact: with SAME padding the output size ``ceil(n / s)`` does not depend on the kernel,
and output ``o`` reads input rows ``o*s - before(k) + j``, where ``before(k)`` is
``max((ceil(n/s) - 1)*s + k - n, 0) // 2``. Placing the small kernel at offset
``d = before(K) - before(k)`` inside the large one reads the same rows, provided
``0 <= d <= K - k``. With stride 1, ``before(k) = (k - 1) // 2`` for every ``n``; with a larger
stride it depends on ``n``, so the input's static height/width must be known and is checked.
VALID padding never matches: the output size ``ceil((n - k + 1) / s)`` changes with the kernel.
(Zero weights multiply real inputs, so an input holding inf/NaN would turn into NaN where the
original output was finite; frozen inference graphs are assumed finite.)
"""

from __future__ import annotations

import numpy as np

from tfopt.optimizer.graph.rewrite import write_const_input
from tfopt.optimizer.graph.shapes import infer_shapes, static_shape
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.search.rules.parallel_ops import (
    CONV_ATTRS,
    attrs_key,
    const_weights,
    const_weights_shape,
    data_format,
    data_inputs,
    int_list,
    siblings_by_input,
)
from tfopt.optimizer.search.substitution import Match, Substitution
from tfopt.optimizer.transforms.base import TransformContext


def same_pad_before(size: int | None, stride: int, kernel: int) -> int | None:
    """Rows of SAME padding before the input, or None when that depends on an unknown size."""
    if stride == 1:
        return (kernel - 1) // 2
    if size is None:
        return None
    out = -(-size // stride)
    return max((out - 1) * stride + kernel - size, 0) // 2


def kernel_offsets(small, large, strides, size) -> tuple[int, int] | None:
    """Where the ``small`` (rows, cols) kernel goes inside the ``large`` one so that both read
    the same input pixels under SAME padding; None when no placement is exact (or provable)."""
    offsets = []
    for axis in (0, 1):
        n = size[axis + 1] if size is not None and len(size) == 4 else None
        stride = strides[axis + 1] if len(strides) == 4 else 1
        before_large = same_pad_before(n, stride, large[axis])
        before_small = same_pad_before(n, stride, small[axis])
        if before_large is None or before_small is None:
            return None
        offset = before_large - before_small
        if not 0 <= offset <= large[axis] - small[axis]:
            return None
        offsets.append(offset)
    return tuple(offsets)


def enlargeable(conv, filter_shape) -> bool:
    return (filter_shape is not None and len(filter_shape) == 4 and data_format(conv) == b"NHWC"
            and conv.attr["padding"].s == b"SAME"
            and all(d == 1 for d in int_list(conv, "dilations")))


class EnlargeConvKernel(Substitution):
    name = "enlarge_conv_kernel"
    description = "zero-pad a conv filter to a sibling conv's larger kernel (enables merging)"

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        by_name = nodes_by_name(graph_def)
        shapes = None
        found = []
        for convs in siblings_by_input(graph_def, "Conv2D").values():
            filters = {c.name: const_weights_shape(by_name, data_inputs(c)[1]) for c in convs}
            usable = [c for c in convs if enlargeable(c, filters[c.name])]
            for conv in usable:
                small = filters[conv.name][:2]
                strides = int_list(conv, "strides")
                targets = set()
                for sibling in usable:
                    large = filters[sibling.name][:2]
                    if (sibling is conv or large == small or large in targets
                            or large[0] < small[0] or large[1] < small[1]
                            or attrs_key(sibling, CONV_ATTRS) != attrs_key(conv, CONV_ATTRS)):
                        continue
                    if shapes is None and any(s != 1 for s in strides[1:3]):
                        shapes = infer_shapes(graph_def)
                    size = static_shape(shapes, data_inputs(conv)[0]) if shapes else None
                    offsets = kernel_offsets(small, large, strides, size)
                    if offsets is None:
                        continue
                    targets.add(large)
                    found.append(Match(self.name, (conv.name, sibling.name),
                                       {"kernel": tuple(large), "offset": offsets}))
        return found

    def apply(self, graph_def, match: Match, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        out = graph_pb2.GraphDef()
        out.CopyFrom(graph_def)
        by_name = nodes_by_name(out)
        conv = by_name[match.nodes[0]]
        weights = const_weights(by_name, data_inputs(conv)[1])
        (rows, cols), (top, left) = match.detail["kernel"], match.detail["offset"]
        enlarged = np.zeros((rows, cols) + weights.shape[2:], dtype=weights.dtype)
        enlarged[top:top + weights.shape[0], left:left + weights.shape[1]] = weights
        filter_index = list(conv.input).index(data_inputs(conv)[1])
        write_const_input(out, by_name, consumers(out), conv, filter_index, enlarged,
                          f"{conv.name}/enlarged_filter", keep=context.boundary)
        return out
