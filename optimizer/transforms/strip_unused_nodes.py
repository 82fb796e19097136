"""strip_unused_nodes: drop every node the outputs do not depend on.

GTT semantics: walk back from the outputs through data and control edges and keep what is
reached; input nodes are kept even when unused, since they are part of the signature. GTT's
``type``/``shape`` parameters, which re-declare the input placeholders, are accepted and applied
to the inputs' ``dtype``/``shape`` attrs.
"""

from __future__ import annotations

from tfopt.optimizer.graph.rewrite import graph_with_only
from tfopt.optimizer.graph.traversal import reachable_from
from tfopt.optimizer.transforms.base import Param, Transform, TransformContext


class StripUnusedNodes(Transform):
    name = "strip_unused_nodes"
    params = (
        Param("type", str, None, "dtype to declare on the input placeholders, e.g. float"),
        Param("shape", str, None, "shape to declare on the input placeholders, e.g. 1,224,224,3"),
    )

    def transform(self, graph_def, context: TransformContext):
        keep = reachable_from(graph_def, context.output_names) | set(context.boundary)
        result = graph_with_only(graph_def, keep)
        for node in result.node:
            if node.name in context.input_names and node.op == "Placeholder":
                self._declare(node)
        return result

    def _declare(self, node) -> None:
        from tensorflow.python.framework import dtypes

        if self["type"]:
            name = {"float": "float32", "double": "float64"}.get(self["type"], self["type"])
            node.attr["dtype"].type = dtypes.as_dtype(name).as_datatype_enum
        if self["shape"]:
            shape = node.attr["shape"].shape
            shape.Clear()
            for dim in self["shape"].split(","):
                shape.dim.add().size = int(dim)
