"""merge_parallel_convs: Conv2Ds reading one tensor -> one Conv2D with concatenated filters.

Matches two or more Conv2Ds that read the same input tensor with identical kernel size, strides,
padding, explicit paddings, dilations, data_format and dtype, each with a constant filter (through
Identity wrappers). The rewrite concatenates the filters along the output-channel axis
(``[H, W, in, out]``'s last axis) into one ``<first>_merged`` Conv2D and splits its output along
the channel axis (3 for NHWC, 1 for NCHW) with ``<first>_merged_split``; each original conv name
becomes an Identity of its slice. When every conv's only reader is a BiasAdd with a constant
bias (and no conv is in the boundary), the biases are concatenated too: one
``<first>_merged_bias`` BiasAdd before the split, and the BiasAdd names become the Identities.
One wide convolution keeps the cores busier than several narrow ones.
"""

from __future__ import annotations

from tfopt.optimizer.graph.traversal import nodes_by_name
from tfopt.optimizer.search.rules.parallel_ops import (
    CONV_ATTRS,
    attrs_key,
    group_matches,
    merge_parallel,
    mergeable_groups,
)
from tfopt.optimizer.search.substitution import Match, Substitution
from tfopt.optimizer.transforms.base import TransformContext


def _conv_key(conv, weights_shape) -> tuple | None:
    if weights_shape is None or len(weights_shape) != 4:
        return None
    return attrs_key(conv, CONV_ATTRS) + (weights_shape[:3],)


def conv_groups(graph_def) -> list[list]:
    """Conv2Ds that can be merged, grouped (two or more each), in graph order."""
    return mergeable_groups(graph_def, "Conv2D", _conv_key)


class MergeParallelConvs(Substitution):
    name = "merge_parallel_convs"
    description = "sibling Conv2Ds on one input -> one Conv2D with concatenated filters + SplitV"

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        return group_matches(self.name, graph_def, conv_groups(graph_def), context.boundary)

    def apply(self, graph_def, match: Match, context: TransformContext):
        first = nodes_by_name(graph_def)[match.nodes[0]]
        nchw = "data_format" in first.attr and first.attr["data_format"].s == b"NCHW"
        return merge_parallel(graph_def, list(match.nodes), weight_axis=3,
                              split_axis=1 if nchw else 3, boundary=context.boundary,
                              with_bias=match.detail.get("with_bias", False))
