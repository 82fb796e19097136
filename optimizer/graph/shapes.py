"""Static tensor shapes of a GraphDef, from TensorFlow's own shape functions at import time."""

from __future__ import annotations

from tfopt.optimizer.tf_runtime import import_tensorflow

Shape = tuple  # of int | None; None for the whole shape when the rank is unknown


def infer_shapes(graph_def) -> dict[str, Shape | None]:
    """``"node:index" -> shape`` for every output of every node (unknown dims are ``None``)."""
    tf = import_tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    shapes: dict[str, Shape | None] = {}
    for op in graph.get_operations():
        for index, tensor in enumerate(op.outputs):
            shape = tensor.shape
            shapes[f"{op.name}:{index}"] = None if shape.rank is None else tuple(shape.as_list())
    return shapes


def static_shape(shapes: dict[str, Shape | None], tensor: str) -> Shape | None:
    """The shape of ``node`` or ``node:i`` from :func:`infer_shapes`'s result."""
    name = tensor if ":" in tensor else f"{tensor}:0"
    return shapes.get(name)
