"""fuse_conv_bias_relu: Conv2D -> BiasAdd(const) -> Relu/Relu6 becomes TF's ``_FusedConv2D``.

Matches a Conv2D (NHWC, dilations 1, float/double) whose only reader is a BiasAdd with a
constant bias (a Const, or computed from constants only, like Keras 3's ``Squeeze(Reshape(b))``,
which stays as the fused op's third input) and the same data_format, whose only reader is a Relu or Relu6. The conv and the
BiasAdd must not be in the boundary (they disappear). The rewrite is one ``_FusedConv2D`` named
like the activation (so its consumers need no rewiring) with the attribute set Grappler's
remapper emits (``fused_ops=[BiasAdd, <act>]``, ``num_args=1``, ``TArgs``, ``epsilon=0``,
``leakyrelu_alpha=0.2``, ``filter_format=HWIO``, ``num_host_args=0``...). The fused CPU kernel
adds the bias and clamps in the convolution's output loop instead of two extra passes over the
tensor. The node keeps the activation's device string: an empty device runs on CPU too.
"""

from __future__ import annotations

from tfopt.optimizer.graph.const_eval import constant_subgraph
from tfopt.optimizer.graph.names import canonical_input
from tfopt.optimizer.graph.rewrite import control_inputs, only_reader
from tfopt.optimizer.graph.traversal import consumers, nodes_by_name
from tfopt.optimizer.search.rules.parallel_ops import data_format, data_inputs, int_list
from tfopt.optimizer.search.substitution import Match, Substitution
from tfopt.optimizer.transforms.base import TransformContext

ACTIVATIONS = frozenset({"Relu", "Relu6"})
CONV_ATTRS_KEPT = ("T", "strides", "padding", "explicit_paddings", "data_format", "dilations",
                   "use_cudnn_on_gpu")


def fusable_conv(conv) -> bool:
    from tensorflow.core.framework import types_pb2

    return (data_format(conv) == b"NHWC"
            and all(d == 1 for d in int_list(conv, "dilations"))
            and conv.attr["T"].type in (types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE))


class FuseConvBiasRelu(Substitution):
    name = "fuse_conv_bias_relu"
    description = "Conv2D + BiasAdd(const) + Relu/Relu6 -> _FusedConv2D named like the activation"
    commutes = True

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        by_name = nodes_by_name(graph_def)
        readers = consumers(graph_def)
        memo: dict[str, bool] = {}
        found = []
        for conv in graph_def.node:
            if conv.op != "Conv2D" or conv.name in context.boundary or not fusable_conv(conv):
                continue
            bias = only_reader(readers, conv.name)
            if (bias is None or bias.op != "BiasAdd" or bias.name in context.boundary
                    or canonical_input(data_inputs(bias)[0]) != conv.name
                    or data_format(bias) != data_format(conv)
                    or constant_subgraph(by_name, data_inputs(bias)[1], memo) is None):
                continue
            activation = only_reader(readers, bias.name)
            if (activation is None or activation.op not in ACTIVATIONS
                    or canonical_input(data_inputs(activation)[0]) != bias.name):
                continue
            found.append(Match(self.name, (conv.name, bias.name, activation.name)))
        return found

    def apply(self, graph_def, match: Match, context: TransformContext):
        from tensorflow.core.framework import graph_pb2, node_def_pb2

        out = graph_pb2.GraphDef()
        out.CopyFrom(graph_def)
        by_name = nodes_by_name(out)
        conv, bias, activation = (by_name[n] for n in match.nodes)
        fused = node_def_pb2.NodeDef(name=activation.name, op="_FusedConv2D",
                                     device=activation.device)
        fused.input.extend(data_inputs(conv)[:2] + [data_inputs(bias)[1]]
                           + control_inputs(conv, bias, activation))
        for attr in CONV_ATTRS_KEPT:
            if attr in conv.attr:
                fused.attr[attr].CopyFrom(conv.attr[attr])
        fused.attr["TArgs"].list.type.append(bias.attr["T"].type)
        fused.attr["num_args"].i = 1
        fused.attr["num_host_args"].i = 0
        fused.attr["fused_ops"].list.s.extend([b"BiasAdd", activation.op.encode()])
        fused.attr["epsilon"].f = 0.0
        fused.attr["leakyrelu_alpha"].f = 0.2
        fused.attr["filter_format"].s = b"HWIO"
        kept = [n for n in out.node if n.name not in match.nodes]
        del out.node[:]
        out.node.extend(kept)
        out.node.append(fused)
        return out
