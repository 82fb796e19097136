"""fold_constants: compute once what depends only on constants, and store the result as a Const.

GTT semantics (``fold_constants_lib.cc``, which runs TF's ConstantFold): every node whose inputs
all come, directly or not, from constants is evaluated at optimization time. Each such node that
the rest of the graph reads becomes a Const holding its value, under the same name, so nothing
downstream needs rewiring; the constant subgraph that fed it goes away. ``ignore_errors`` skips
a node that fails to evaluate instead of failing the transform; ``clear_output_shapes`` drops
the ``_output_shapes`` attrs that older graphs carry and that go stale after rewrites.

What is never folded: Placeholders, stateful ops (random, asserts, I/O), ops unknown to the op
registry, function calls, control-flow ops and anything behind them (so nothing inside a while frame or a cond
branch: those constants read a pivot), the graph's inputs, outputs and protected nodes (their
constant inputs are folded instead), and results that cannot or should not be a Const: resource
and variant tensors, and tensors of more than 50M elements. A node with several outputs becomes
one Const per output its readers use, named ``<node>__folded_<index>``.

Precondition: a graph TensorFlow can import; the constant part is run on the CPU of this machine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tfopt.optimizer.errors import first_line
from tfopt.optimizer.graph.colocation import redirect_colocation
from tfopt.optimizer.graph.const_eval import is_pure
from tfopt.optimizer.graph.control_flow import execution_order
from tfopt.optimizer.graph.names import (
    canonical_input,
    is_control_input,
    node_name_from_input,
    output_index,
)
from tfopt.optimizer.graph.rewrite import graph_with_only, unique_name
from tfopt.optimizer.graph.traversal import consumers, reachable_from
from tfopt.optimizer.graph.validate import InvalidGraphError
from tfopt.optimizer.transforms.base import Param, Transform, TransformContext, TransformRefused

log = logging.getLogger(__name__)

MAX_FOLDED_ELEMENTS = 50_000_000


@dataclass(frozen=True)
class Folded:
    """The values of a node's outputs that its readers outside the constant subgraph use."""

    num_outputs: int
    outputs: dict  # output index -> (numpy value, tf.DType)


class FoldConstants(Transform):
    name = "fold_constants"
    params = (
        Param("ignore_errors", bool, False,
              "skip a node that fails to evaluate instead of failing the transform"),
        Param("clear_output_shapes", bool, True, "drop the stale _output_shapes attrs"),
    )

    def transform(self, graph_def, context: TransformContext):
        if self["clear_output_shapes"]:
            for node in graph_def.node:
                if "_output_shapes" in node.attr:
                    del node.attr["_output_shapes"]
        foldable = self._foldable(graph_def, context)
        readers = consumers(graph_def)
        frontier = [node for node in graph_def.node
                    if node.name in foldable and node.op != "Const"
                    and (not readers.get(node.name)
                         or any(r.name not in foldable for r in readers[node.name]))]
        if not frontier:
            return graph_def
        values = self._evaluate(graph_def, foldable, frontier, readers)
        return _replace(graph_def, foldable, frontier, values, readers)

    @staticmethod
    def _foldable(graph_def, context: TransformContext) -> set[str]:
        """Nodes computed from constants alone (through data and control inputs)."""
        try:
            order = execution_order(graph_def)
        except InvalidGraphError as exc:
            raise TransformRefused(f"fold_constants: {exc}") from None
        foldable: set[str] = set()
        for i in order:
            node = graph_def.node[i]
            # Control inputs count too: a Const reading ^pivot belongs to a branch or a frame.
            if node.name not in context.boundary and is_pure(node) and \
                    all(node_name_from_input(inp) in foldable for inp in node.input):
                foldable.add(node.name)
        return foldable

    def _evaluate(self, graph_def, foldable: set[str], frontier: list, readers: dict) -> dict:
        """Frontier node name -> Folded, for the nodes that can and should become Consts."""
        tf, graph = _import_constant_subgraph(graph_def, foldable)
        fetches: dict[str, dict[int, object]] = {}
        for node in frontier:
            outputs = graph.get_operation_by_name(node.name).outputs
            wanted = [0] if len(outputs) == 1 else _outputs_read_outside(node, foldable, readers)
            why = _why_not_foldable([outputs[i] for i in wanted], tf) if wanted else \
                "it has no output, or none is read outside the constant subgraph"
            if why:
                log.debug("fold_constants: keeping %s (%s): %s", node.name, node.op, why)
                continue
            fetches[node.name] = {i: outputs[i] for i in wanted}

        if not fetches:
            return {}

        def folded(values: dict) -> dict:
            return {name: Folded(len(graph.get_operation_by_name(name).outputs),
                                 {i: (v, fetches[name][i].dtype) for i, v in outputs.items()})
                    for name, outputs in _checked(values).items()}

        with tf.compat.v1.Session(graph=graph, config=_cpu_config(tf)) as session:
            try:
                return folded(session.run(fetches))
            except tf.errors.OpError:
                pass  # find which nodes fail, one at a time
            values = {}
            for name, tensors in fetches.items():
                try:
                    values[name] = session.run(tensors)
                except tf.errors.OpError as exc:
                    message = first_line(exc)
                    if not self["ignore_errors"]:
                        raise TransformRefused(
                            f"fold_constants: cannot evaluate node '{name}': {message} "
                            f"(ignore_errors=true skips it)") from None
                    log.debug("fold_constants: keeping %s: evaluation failed: %s", name, message)
            return folded(values)


def _import_constant_subgraph(graph_def, foldable: set[str]):
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    subgraph = graph_with_only(graph_def, foldable)
    for copy in subgraph.node:
        copy.device = ""  # evaluated here, whatever device the graph was placed on
        if "_class" in copy.attr:
            del copy.attr["_class"]
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.compat.v1.import_graph_def(subgraph, name="")
    except (ValueError, tf.errors.OpError) as exc:
        raise TransformRefused(f"fold_constants: cannot import the constant subgraph: {exc}") \
            from None
    return tf, graph


def _cpu_config(tf):
    return tf.compat.v1.ConfigProto(allow_soft_placement=True, device_count={"GPU": 0})


def _outputs_read_outside(node, foldable: set[str], readers: dict) -> list[int]:
    return sorted({output_index(inp) for reader in readers.get(node.name, ())
                   if reader.name not in foldable for inp in reader.input
                   if not is_control_input(inp) and node_name_from_input(inp) == node.name})


def _why_not_foldable(tensors: list, tf) -> str | None:
    for tensor in tensors:
        if tensor.dtype in (tf.resource, tf.variant) or tensor.dtype._is_ref_dtype:
            return f"output {tensor.name} is a {tensor.dtype.name} tensor"
        if tensor.shape.is_fully_defined() and tensor.shape.num_elements() > MAX_FOLDED_ELEMENTS:
            return f"output {tensor.name} has {tensor.shape.num_elements()} elements"
    return None


def _checked(values: dict) -> dict:
    import numpy as np

    checked = {}
    for name, outputs in values.items():
        too_large = [i for i, v in outputs.items() if np.size(v) > MAX_FOLDED_ELEMENTS]
        if too_large:
            log.debug("fold_constants: keeping %s: output %d has more than %d elements",
                      name, too_large[0], MAX_FOLDED_ELEMENTS)
            continue
        checked[name] = outputs
    return checked


def _const_node(name: str, device: str, value, dtype):
    import numpy as np
    from tensorflow.core.framework import node_def_pb2
    from tensorflow.python.framework import tensor_util

    node = node_def_pb2.NodeDef(name=name, op="Const", device=device)
    node.attr["dtype"].type = dtype.as_datatype_enum
    node.attr["value"].tensor.CopyFrom(
        tensor_util.make_tensor_proto(np.asarray(value), dtype=dtype))
    return node


def _replace(graph_def, foldable: set[str], frontier: list, values: dict, readers: dict):
    """Put the Consts in, rewire readers of split outputs, drop what nothing reads any more."""
    from tensorflow.core.framework import graph_pb2

    names = {node.name for node in graph_def.node}
    split: dict[str, dict[int, str]] = {}  # multi-output node -> output index -> its Const
    nodes = []
    for node in graph_def.node:
        fold = values.get(node.name)
        if fold is None:
            nodes.append(node)
            continue
        if fold.num_outputs == 1:
            value, dtype = fold.outputs[0]
            nodes.append(_const_node(node.name, node.device, value, dtype))
            continue
        split[node.name] = {}
        for i, (value, dtype) in sorted(fold.outputs.items()):
            const_name = unique_name(names, f"{node.name}__folded_{i}")
            names.add(const_name)
            split[node.name][i] = const_name
            nodes.append(_const_node(const_name, node.device, value, dtype))
        nodes.append(node)  # dropped below once its outside readers are rewired

    for node in nodes:
        if node.name in foldable:
            continue
        for k, inp in enumerate(node.input):
            source = node_name_from_input(inp)
            if source in split:
                first = split[source][min(split[source])]
                node.input[k] = f"^{first}" if is_control_input(inp) else \
                    canonical_input(f"{split[source][output_index(inp)]}:0")

    result = graph_pb2.GraphDef()
    result.CopyFrom(graph_def)
    del result.node[:]
    result.node.extend(nodes)
    frontier_names = {node.name for node in frontier}
    roots = [node.name for node in result.node
             if node.name not in foldable or not readers.get(node.name)
             or (node.name in frontier_names and node.name not in split)]
    roots += [name for consts in split.values() for name in consts.values()]
    keep = reachable_from(result, roots)
    dropped = [node.name for node in result.node if node.name not in keep]
    if dropped:
        kept_nodes = [node for node in result.node if node.name in keep]
        del result.node[:]
        result.node.extend(kept_nodes)
        redirect_colocation(result, dict.fromkeys(dropped))
    log.debug("fold_constants: %d nodes became Consts, %d constant nodes dropped",
              sum(len(v) for v in split.values()) + len(values) - len(split), len(dropped))
    return result

