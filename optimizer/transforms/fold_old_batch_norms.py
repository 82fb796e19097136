"""fold_old_batch_norms: fold monolithic inference batch-norm ops into the convolution before them.

GTT semantics (fold_old_batch_norms.cc): ``BatchNormWithGlobalNormalization`` or
``FusedBatchNorm`` reading a ``Conv2D``/``DepthwiseConv2dNative`` becomes the convolution with its
weights multiplied by ``scale = gamma / sqrt(variance + epsilon)`` (without ``gamma`` when a
BatchNormWithGlobalNormalization has ``scale_after_normalization=false``), followed by a
``BiasAdd`` of ``offset = beta - mean * scale`` from a new Const ``<conv>_bn_offset``. The BiasAdd
takes the batch norm's name, so nothing downstream is rewired. Also handled, as GTT does, a
``BatchToSpaceND`` between the convolution and the batch norm (atrous convolution): the BiasAdd
goes between the convolution and the BatchToSpaceND (named ``<conv>/biasadd``), and the
BatchToSpaceND takes the batch norm's name. Beyond GTT: ``FusedBatchNormV2``/``V3`` (what TF 1.14+
and Keras 2 emit), and a ``BiasAdd`` already between the convolution and the batch norm, whose
bias is folded into the new one.

Preconditions, each checked; a batch norm that fails one is left as it is (debug log):
- a FusedBatchNorm has ``is_training=false`` (its default is true: training mode normalizes with
  the batch's own statistics, which no constant can reproduce) and NHWC layout;
- only output 0 (``y``) of the batch norm is read;
- the conv weights, mean, variance, beta and gamma (and the BiasAdd's bias) depend on constants
  only, and the batch-norm parameters are vectors with one entry per conv output channel;
- every node between the convolution and the batch norm is read by the next one only, and the
  nodes that go away are not inputs, outputs or protected nodes.

MatMul is not matched: these batch-norm ops take 4-D input, which a MatMul does not produce.
Concat-of-two-convs (GTT's third pattern) is not handled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.graph.const_eval import constant_subgraph, constant_values, is_pure
from tfopt.optimizer.graph.conv_weights import channels_last, output_channels, scale_output_channels
from tfopt.optimizer.graph.names import (
    canonical_input,
    is_control_input,
    node_name_from_input,
    output_index,
)
from tfopt.optimizer.graph.rewrite import (
    control_inputs,
    fold_each,
    make_const,
    only_reader,
    unique_name,
    write_const_input,
)
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)

_CONVS = frozenset({"Conv2D", "DepthwiseConv2dNative"})
_FUSED = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"})
_GLOBAL = "BatchNormWithGlobalNormalization"

# Input positions of mean, variance, beta (offset) and gamma (scale): the two op families order
# their inputs differently.
_PARAM_INDEX = {
    _GLOBAL: {"mean": 1, "variance": 2, "beta": 3, "gamma": 4},
    **{op: {"gamma": 1, "beta": 2, "mean": 3, "variance": 4} for op in _FUSED},
}


@dataclass
class _Match:
    batch_norm: object
    conv: object
    bias_add: object | None
    batch_to_space: object | None
    bias_before_batch_to_space: bool

    @property
    def removed(self) -> list:
        """Nodes that go: the batch norm's position is taken over, the rest folds away."""
        if self.batch_to_space is None or (self.bias_add is not None
                                           and not self.bias_before_batch_to_space):
            # The batch norm becomes the BiasAdd; a BatchToSpaceND before it stays.
            return [self.bias_add] if self.bias_add is not None else []
        # The batch norm becomes the BatchToSpaceND; a BiasAdd before it stays, with a new bias.
        return [self.batch_to_space]

    def param(self, name: str) -> str:
        return self.batch_norm.input[_PARAM_INDEX[self.batch_norm.op][name]]


class FoldOldBatchNorms(Transform):
    name = "fold_old_batch_norms"
    params = ()

    def transform(self, graph_def, context: TransformContext):
        matches = self.find_matches(graph_def, context.boundary)
        if matches:
            self.fold_matches(graph_def, matches, context.boundary)
        return graph_def

    def find_matches(self, graph_def, boundary) -> list[_Match]:
        """Every batch norm of ``graph_def`` (graph order) that follows a conv with constant
        operands; the parameter shapes need the values (:meth:`foldable`)."""
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        memo: dict[str, bool] = {}
        return [m for m in (self._match(node, by_name, readers, memo, boundary)
                            for node in list(graph_def.node)
                            if node.op in _FUSED or node.op == _GLOBAL) if m]

    @staticmethod
    def match_values(graph_def, matches: list[_Match]) -> dict:
        """The constant operands of ``matches``, evaluated once for all of them."""
        wanted = [t for m in matches
                  for t in (m.conv.input[1], m.bias_add and m.bias_add.input[1],
                            *(m.param(p) for p in ("mean", "variance", "beta", "gamma"))) if t]
        return constant_values(graph_def, wanted, nodes_by_name(graph_def))

    def fold_matches(self, graph_def, matches: list[_Match], boundary) -> list[_Match]:
        """Fold ``matches`` (found in ``graph_def`` by :meth:`find_matches`) in place; returns
        the ones that were folded."""
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        values = self.match_values(graph_def, matches)
        return fold_each(graph_def, matches, lambda match, leftovers: self._fold(
            graph_def, match, values, by_name, readers, boundary, leftovers), boundary, is_pure)

    def _match(self, batch_norm, by_name, readers, memo, boundary) -> _Match | None:
        def constant(tensor: str) -> bool:
            return constant_subgraph(by_name, tensor, memo) is not None

        def skip(reason: str) -> None:
            log.debug("%s: leaving %s: %s", self.name, batch_norm.name, reason)

        if batch_norm.op in _FUSED:
            if "is_training" not in batch_norm.attr or batch_norm.attr["is_training"].b:
                return skip("is_training is true")
            if not channels_last(batch_norm):
                return skip("not NHWC")
        if len(batch_norm.input) < 5 or not all(constant(batch_norm.input[i]) for i in range(1, 5)):
            return skip("mean, variance, beta or gamma is not constant")
        later_outputs = [i for r in readers.get(batch_norm.name, []) for i in r.input
                         if node_name_from_input(i) == batch_norm.name
                         and not is_control_input(i) and output_index(i) != 0]
        if later_outputs:
            return skip("an output other than y is read")

        bias_add = batch_to_space = None
        bias_before_batch_to_space = False
        node, reader = by_name.get(node_name_from_input(batch_norm.input[0])), batch_norm
        while node is not None and node.op not in _CONVS:
            if only_reader(readers, node.name) is not reader \
                    or output_index(reader.input[0]) != 0:
                return skip(f"{node.name} is read elsewhere too")
            if node.op == "BiasAdd" and bias_add is None:
                if not channels_last(node) or not constant(node.input[1]):
                    return skip(f"{node.name} is not a constant NHWC bias")
                bias_add = node
                bias_before_batch_to_space = batch_to_space is not None
            elif node.op == "BatchToSpaceND" and batch_to_space is None:
                batch_to_space = node
            else:
                return skip("not preceded by a convolution")
            node, reader = by_name.get(node_name_from_input(node.input[0])), node
        if node is None or canonical_input(reader.input[0]) != node.name:
            return skip("not preceded by a convolution")
        if only_reader(readers, node.name) is not reader:
            return skip(f"{node.name} is read elsewhere too")
        if not channels_last(node) or not constant(node.input[1]):
            return skip(f"{node.name} is not NHWC with constant weights")
        match = _Match(batch_norm, node, bias_add, batch_to_space, bias_before_batch_to_space)
        stuck = [n.name for n in match.removed if n.name in boundary]
        if stuck:
            return skip(f"{stuck} must keep their place")
        return match

    def foldable(self, match: _Match, values) -> bool:
        """The batch-norm parameters are vectors with one entry per conv output channel."""
        channels = output_channels(match.conv, values[match.conv.input[1]])
        if channels is None or any(np.shape(values[match.param(p)]) != (channels,)
                                   for p in ("mean", "variance", "beta", "gamma")):
            log.debug("%s: leaving %s: parameters are not [%s] vectors", self.name,
                      match.batch_norm.name, channels)
            return False
        return True

    def _fold(self, graph_def, match: _Match, values, by_name, readers, boundary,
              leftovers) -> bool:
        if not self.foldable(match, values):
            return False
        batch_norm, conv = match.batch_norm, match.conv
        weights = values[conv.input[1]]
        params = {p: np.asarray(values[match.param(p)], np.float64)
                  for p in ("mean", "variance", "beta", "gamma")}
        epsilon = self._epsilon(batch_norm)
        scale = 1.0 / np.sqrt(params["variance"] + epsilon)
        if batch_norm.op in _FUSED or (
                "scale_after_normalization" in batch_norm.attr
                and batch_norm.attr["scale_after_normalization"].b):
            scale = scale * params["gamma"]
        bias = params["beta"] - params["mean"] * scale
        if match.bias_add is not None:
            bias = bias + np.asarray(values[match.bias_add.input[1]], np.float64) * scale
        bias = bias.astype(weights.dtype)

        gone = {n.name for n in match.removed} | {batch_norm.name}
        leftovers.append(node_name_from_input(conv.input[1]))
        leftovers.extend(node_name_from_input(i) for n in match.removed + [batch_norm]
                         for i in n.input)
        if match.bias_add is not None:
            leftovers.append(node_name_from_input(match.bias_add.input[1]))
        moved_controls = [i for i in control_inputs(*match.removed, batch_norm)
                          if node_name_from_input(i) not in gone]
        write_const_input(graph_def, by_name, readers, conv, 1,
                          scale_output_channels(conv, weights, scale),
                          f"{conv.name}/folded_weights", boundary)
        offset = graph_def.node.add()
        offset.CopyFrom(make_const(unique_name(by_name, f"{conv.name}_bn_offset"), bias,
                                   conv.device))
        by_name[offset.name] = offset

        b2s = match.batch_to_space
        if b2s is None or (match.bias_add is not None and not match.bias_before_batch_to_space):
            # The BiasAdd reads whatever the folded-away chain read: the conv or BatchToSpaceND.
            source = match.bias_add.input[0] if match.bias_add is not None else conv.name
            _become_bias_add(batch_norm, source, offset.name, conv.attr["T"])
        else:
            if match.bias_add is not None:
                match.bias_add.input[1] = offset.name
                bias_add_name = match.bias_add.name
            else:
                bias_add = graph_def.node.add()
                bias_add.name = unique_name(by_name, f"{conv.name}/biasadd")
                bias_add.device = conv.device
                by_name[bias_add.name] = bias_add
                _become_bias_add(bias_add, conv.name, offset.name, conv.attr["T"])
                bias_add_name = bias_add.name
            name = batch_norm.name
            batch_norm.CopyFrom(b2s)
            batch_norm.name = name
            batch_norm.input[0] = bias_add_name
        batch_norm.input.extend(i for i in moved_controls if i not in batch_norm.input)
        log.debug("%s: folded %s into %s", self.name, batch_norm.name, conv.name)
        return True

    @staticmethod
    def _epsilon(batch_norm) -> float:
        if batch_norm.op == _GLOBAL:
            return batch_norm.attr["variance_epsilon"].f
        # FusedBatchNorm's declared default, for a NodeDef written without default attrs.
        return batch_norm.attr["epsilon"].f if "epsilon" in batch_norm.attr else 1e-4


def _become_bias_add(node, source: str, bias: str, dtype) -> None:
    """Turn ``node`` into ``BiasAdd(source, bias)``, keeping its name and device."""
    name, device = node.name, node.device
    node.Clear()
    node.name, node.op, node.device = name, "BiasAdd", device
    node.input.extend([source, bias])
    node.attr["T"].CopyFrom(dtype)
    node.attr["data_format"].s = b"NHWC"
