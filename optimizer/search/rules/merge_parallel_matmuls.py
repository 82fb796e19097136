"""merge_parallel_matmuls: MatMuls sharing input A -> one MatMul with concatenated B.

Matches two or more MatMuls that read the same tensor as A with the same ``transpose_a`` and
dtype, ``transpose_b`` false, and a constant B (through Identity wrappers) with the same number of
rows. The rewrite concatenates the B matrices along axis 1 into one ``<first>_merged`` MatMul and
splits its output along axis 1 with ``<first>_merged_split``; each original MatMul name becomes an
Identity of its columns. As with convolutions, a BiasAdd with a constant bias that is each
MatMul's only reader is merged too (Dense layers). One wider matrix product replaces several
narrow ones (e.g. the query/key/value projections of attention).
"""

from __future__ import annotations

from tfopt.optimizer.search.rules.parallel_ops import (
    attrs_key,
    group_matches,
    merge_parallel,
    mergeable_groups,
)
from tfopt.optimizer.search.substitution import Match, Substitution
from tfopt.optimizer.transforms.base import TransformContext


def _matmul_key(matmul, weights_shape) -> tuple | None:
    if "transpose_b" in matmul.attr and matmul.attr["transpose_b"].b:
        return None
    if weights_shape is None or len(weights_shape) != 2:
        return None
    return attrs_key(matmul, ("T", "transpose_a")) + (weights_shape[0],)


def matmul_groups(graph_def) -> list[list]:
    """MatMuls that can be merged, grouped (two or more each), in graph order."""
    return mergeable_groups(graph_def, "MatMul", _matmul_key)


class MergeParallelMatmuls(Substitution):
    name = "merge_parallel_matmuls"
    description = "MatMuls sharing input A -> one MatMul with B concatenated on axis 1 + SplitV"

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        return group_matches(self.name, graph_def, matmul_groups(graph_def), context.boundary)

    def apply(self, graph_def, match: Match, context: TransformContext):
        return merge_parallel(graph_def, list(match.nodes), weight_axis=1, split_axis=1,
                              boundary=context.boundary,
                              with_bias=match.detail.get("with_bias", False))
