"""fold_batch_norms: bake a per-channel multiply (and the add after it) into the weights before it.

GTT semantics (fold_batch_norms.cc): ``Mul(Conv2D|DepthwiseConv2dNative|MatMul(x, W), s)`` where
``s`` is constant per output channel becomes the same op with weights ``W * s``, carrying the
Mul's name. That is what a batch norm looks like once it has been lowered to arithmetic.

Keras 3 exports an inference BatchNormalization as ``x * scale + shift``, after the layer's own
BiasAdd, which GTT leaves in place. This transform also folds the whole chain::

    conv -> [BiasAdd(b)] -> Mul(s) -> [Add|AddV2(t)]   ==>   conv(W * s) -> BiasAdd(b * s + t)

The last node of the chain keeps its name (as a BiasAdd, or as the conv when there is nothing to
add), so nothing downstream is rewired; the conv keeps its own name when a BiasAdd follows it.
The folded bias is a new Const ``<conv>_bn_offset``, GTT's name for it.

Constants: in a frozen Keras graph ``s`` and ``t`` are still small constant subgraphs
(``Rsqrt(var + eps) * gamma``, ``beta - mean * s``) and the bias is ``Squeeze(Reshape(b))``. They
are evaluated here (``tfopt.optimizer.graph.const_eval``), so this transform does not need
``fold_constants`` to run first. Weights are rewritten in place when nothing else reads them,
otherwise through a new ``<conv>/folded_weights`` Const. Constant subgraphs that nothing reads
afterwards are removed.

Preconditions, each checked; a chain that fails one is left as it is (debug log):
- the weights (input 1), bias, scale and shift depend on constants only;
- the scale and shift are per output channel: a scalar, ``[C]`` or ``[1, ..., 1, C]``, of rank at
  most the output's (a shift that is not is left as a separate add after the fold);
- convolutions are NHWC, since the channel is then the last axis;
- the conv, BiasAdd and Mul outputs are read by the next node of the chain only (otherwise the
  unfolded value is still needed), and none of the nodes that go away is an input, output or
  protected node.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tfopt.optimizer.graph.const_eval import constant_subgraph, constant_values, is_pure
from tfopt.optimizer.graph.conv_weights import (
    OUTPUT_RANK,
    SCALABLE_OPS,
    channels_last,
    output_channels,
    per_channel,
    scale_output_channels,
)
from tfopt.optimizer.graph.names import canonical_input, is_control_input, node_name_from_input
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

_ADDS = frozenset({"Add", "AddV2"})


@dataclass
class _Chain:
    conv: object
    bias_add: object | None
    mul: object
    scale: str  # tensor name of the Mul's constant operand
    add: object | None = None
    shift: str | None = None

    @property
    def final(self):
        """The chain's last node: it stays, rewritten, so its readers need no rewiring."""
        return self.add or self.mul

    @property
    def removed(self) -> list:
        """Nodes that disappear. With nothing to add, the conv itself moves into the Mul's place
        (GTT's case); otherwise the conv stays and the nodes between it and the end go."""
        if self.bias_add is None and self.add is None:
            return [self.conv]
        return [n for n in (self.bias_add, self.mul) if n is not self.final and n is not None]


class FoldBatchNorms(Transform):
    name = "fold_batch_norms"
    params = ()

    def transform(self, graph_def, context: TransformContext):
        chains = self.find_chains(graph_def)
        if chains:
            self.fold_chains(graph_def, chains, context.boundary)
        return graph_def

    def find_chains(self, graph_def) -> list[_Chain]:
        """Every conv -> [BiasAdd] -> Mul -> [Add] chain of ``graph_def``, in graph order, whose
        operands are constant; the per-channel checks need the values (:meth:`foldable`)."""
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        memo: dict[str, bool] = {}
        return [c for c in (self._match(node, by_name, readers, memo)
                            for node in list(graph_def.node) if node.op in SCALABLE_OPS) if c]

    @staticmethod
    def chain_values(graph_def, chains: list[_Chain]) -> dict:
        """The constant operands of ``chains``, evaluated once for all of them."""
        wanted = [t for c in chains for t in (c.conv.input[1], c.scale, c.shift,
                                              c.bias_add and c.bias_add.input[1]) if t]
        return constant_values(graph_def, wanted, nodes_by_name(graph_def))

    def fold_chains(self, graph_def, chains: list[_Chain], boundary) -> list[_Chain]:
        """Fold ``chains`` (found in ``graph_def`` by :meth:`find_chains`) in place; returns the
        ones that were folded."""
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        values = self.chain_values(graph_def, chains)
        return fold_each(graph_def, chains, lambda chain, leftovers: self._fold(
            graph_def, chain, values, by_name, readers, boundary, leftovers), boundary, is_pure)

    def _match(self, conv, by_name, readers, memo) -> _Chain | None:
        def constant(tensor: str) -> bool:
            return constant_subgraph(by_name, tensor, memo) is not None

        if len(conv.input) < 2 or not channels_last(conv) or not constant(conv.input[1]):
            return None
        node = only_reader(readers, conv.name)
        bias_add = None
        if (node is not None and node.op == "BiasAdd"
                and canonical_input(node.input[0]) == conv.name):
            if not channels_last(node) or not constant(node.input[1]):
                return None
            bias_add, node = node, only_reader(readers, node.name)
        if node is None or node.op != "Mul":
            return None
        previous = (bias_add or conv).name
        scale = _other_operand(node, previous)
        if scale is None or not constant(scale):
            log.debug("%s: %s does not multiply %s by a constant", self.name, node.name, previous)
            return None
        chain = _Chain(conv, bias_add, node, scale)
        add = only_reader(readers, node.name)
        if add is not None and add.op in _ADDS:
            shift = _other_operand(add, node.name)
            if shift is not None and constant(shift):
                chain.add, chain.shift = add, shift
        return chain

    def foldable(self, chain: _Chain, values, boundary) -> bool:
        """The checks that need the constants' values; drops an add whose shift is not per
        channel from ``chain`` (the fold then stops at the Mul)."""
        conv = chain.conv
        weights = values[conv.input[1]]
        channels = output_channels(conv, weights)
        rank = OUTPUT_RANK[conv.op]
        scale = per_channel(values[chain.scale], channels, rank) if channels else None
        if scale is None:
            log.debug("%s: %s scale of shape %s is not per output channel of %s", self.name,
                      chain.mul.name, values[chain.scale].shape, conv.name)
            return False
        if chain.add is not None and per_channel(values[chain.shift], channels, rank) is None:
            log.debug("%s: %s shift is not per channel; folding up to %s only", self.name,
                      chain.add.name, chain.mul.name)
            chain.add = chain.shift = None

        stuck = [n.name for n in chain.removed if n.name in boundary]
        if stuck:
            log.debug("%s: leaving %s, %s must keep its place", self.name, conv.name, stuck)
            return False
        return chain.bias_add is None or per_channel(
            values[chain.bias_add.input[1]], channels, 1) is not None

    def _fold(self, graph_def, chain: _Chain, values, by_name, readers, boundary,
              leftovers) -> bool:
        if not self.foldable(chain, values, boundary):
            return False
        conv = chain.conv
        weights = values[conv.input[1]]
        channels = output_channels(conv, weights)
        rank = OUTPUT_RANK[conv.op]
        scale = per_channel(values[chain.scale], channels, rank)

        bias = None
        if chain.bias_add is not None:
            bias = per_channel(values[chain.bias_add.input[1]], channels, 1) * scale
        if chain.add is not None:
            shift = per_channel(values[chain.shift], channels, rank)
            bias = shift if bias is None else bias + shift

        final = chain.final
        gone = {n.name for n in chain.removed} | {final.name}
        leftovers.append(node_name_from_input(conv.input[1]))
        leftovers.extend(node_name_from_input(i) for n in chain.removed + [final]
                         for i in n.input)
        dropped_controls = [i for i in control_inputs(*chain.removed, final)
                            if node_name_from_input(i) not in gone]
        write_const_input(graph_def, by_name, readers, conv, 1,
                          scale_output_channels(conv, weights, scale),
                          f"{conv.name}/folded_weights", boundary)
        if bias is None:
            # GTT's own case: the conv itself takes the Mul's name.
            name = final.name
            final.CopyFrom(conv)
            final.name = name
        else:
            offset = graph_def.node.add()
            offset.CopyFrom(make_const(unique_name(by_name, f"{conv.name}_bn_offset"),
                                       bias.astype(weights.dtype), conv.device))
            by_name[offset.name] = offset
            _become_bias_add(final, conv, offset.name)
        final.input.extend(i for i in dropped_controls if i not in final.input)
        log.debug("%s: folded %s into the weights of %s", self.name,
                  ", ".join(n.name for n in (chain.bias_add, chain.mul, chain.add) if n),
                  conv.name)
        return True


def _other_operand(node, operand: str) -> str | None:
    """The input of binary ``node`` that is not ``operand``, if ``operand`` is one of them."""
    data = [canonical_input(i) for i in node.input if not is_control_input(i)]
    if len(data) != 2 or operand not in data or data[0] == data[1]:
        return None
    return data[1] if data[0] == operand else data[0]


def _become_bias_add(node, conv, bias: str) -> None:
    """Turn ``node`` into ``BiasAdd(conv, bias)``, keeping its name and device."""
    name, device = node.name, node.device
    node.Clear()
    node.name, node.op, node.device = name, "BiasAdd", device
    node.input.extend([conv.name, bias])
    node.attr["T"].CopyFrom(conv.attr["T"])
    node.attr["data_format"].s = b"NHWC"
