"""fold_conv_batchnorm: fold one convolution's batch norm into its weights.

Two forms of an inference batch norm follow a convolution in a frozen graph, and each is folded
by the code of the transform that folds them all (one match here, so the search can cost it):

- arithmetic (Keras 3, or any lowered batch norm)::

      Conv2D|DepthwiseConv2dNative|MatMul -> [BiasAdd(b)] -> Mul(s) -> [Add|AddV2(t)]
      ==> conv(W * s) -> BiasAdd(b * s + t)

  via :class:`tfopt.optimizer.transforms.fold_batch_norms.FoldBatchNorms`;
- a monolithic ``FusedBatchNorm``/``V2``/``V3`` (``is_training=false``) or
  ``BatchNormWithGlobalNormalization`` after a Conv2D/DepthwiseConv2dNative, with an optional
  BiasAdd or BatchToSpaceND between them, via
  :class:`tfopt.optimizer.transforms.fold_old_batch_norms.FoldOldBatchNorms`.

Preconditions are those transforms' own (constant weights and parameters, one value per output
channel, NHWC, every intermediate node read by the next one only, no boundary node folded
away); ``matches`` checks all of them, including those that need the constants' values, so
every match it returns applies. The last node of the chain keeps its name.
"""

from __future__ import annotations

from tfopt.optimizer.search.substitution import Match, Substitution
from tfopt.optimizer.transforms.base import TransformContext
from tfopt.optimizer.transforms.fold_batch_norms import FoldBatchNorms
from tfopt.optimizer.transforms.fold_old_batch_norms import FoldOldBatchNorms

_ARITHMETIC = "arithmetic"
_FUSED = "batch_norm_op"


class FoldConvBatchNorm(Substitution):
    name = "fold_conv_batchnorm"
    description = "fold a batch norm (Mul/Add arithmetic or FusedBatchNorm) into the conv weights"
    commutes = True

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        found = []
        arithmetic = FoldBatchNorms()
        chains = arithmetic.find_chains(graph_def)
        if chains:
            values = arithmetic.chain_values(graph_def, chains)
            found += [Match(self.name, _chain_nodes(c), {"form": _ARITHMETIC})
                      for c in chains if arithmetic.foldable(c, values, context.boundary)]
        monolithic = FoldOldBatchNorms()
        batch_norms = monolithic.find_matches(graph_def, context.boundary)
        if batch_norms:
            values = monolithic.match_values(graph_def, batch_norms)
            found += [Match(self.name, _batch_norm_nodes(m), {"form": _FUSED})
                      for m in batch_norms if monolithic.foldable(m, values)]
        return sorted(found, key=lambda m: m.nodes)

    def apply(self, graph_def, match: Match, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        result = graph_pb2.GraphDef()
        result.CopyFrom(graph_def)
        if match.detail.get("form") == _FUSED:
            transform = FoldOldBatchNorms()
            found = [m for m in transform.find_matches(result, context.boundary)
                     if _batch_norm_nodes(m) == match.nodes]
            folded = found and transform.fold_matches(result, found, context.boundary)
        else:
            transform = FoldBatchNorms()
            # The match was made from the chain as foldable() left it: a non per-channel shift
            # is dropped there, and again here by the same check inside fold_chains.
            found = [c for c in transform.find_chains(result)
                     if _chain_nodes(c)[:len(match.nodes)] == match.nodes]
            folded = found and transform.fold_chains(result, found[:1], context.boundary)
        if not folded:
            raise ValueError(f"{match.describe()} does not apply to this graph")
        return result


def _chain_nodes(chain) -> tuple[str, ...]:
    return tuple(n.name for n in (chain.conv, chain.bias_add, chain.mul, chain.add) if n)


def _batch_norm_nodes(match) -> tuple[str, ...]:
    return tuple(n.name for n in (match.conv, match.bias_add, match.batch_to_space,
                                  match.batch_norm) if n)
