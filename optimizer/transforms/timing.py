"""Time two or more GraphDefs against each other in this process: median latency per graph.

Meant for a transform deciding whether its rewrite pays off, not for benchmarking: a handful of
runs on generated inputs, one session per graph, the graphs interleaved run by run (in
alternating order) so that a burst of load on a shared machine hits them all alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import numpy as np

from tfopt.optimizer.graph.names import node_name_from_input
from tfopt.optimizer.inputs.generated import infer_int_ranges, make_inputs
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo, dtype_name


def placeholder_specs(graph_def, input_names: Sequence[str]) -> SignatureInfo:
    """The graph's inputs, read from their placeholders' ``dtype`` and ``shape`` attrs, as a
    signature keyed by node name."""
    by_name = {n.name: n for n in graph_def.node}
    specs = []
    for name in input_names:
        node = by_name[node_name_from_input(name)]
        shape = None  # no shape attr, or unknown rank
        if "shape" in node.attr and not node.attr["shape"].shape.unknown_rank:
            shape = tuple(None if d.size < 0 else int(d.size)
                          for d in node.attr["shape"].shape.dim)
        specs.append(TensorSpecInfo(node.name, f"{node.name}:0",
                                    dtype_name(node.attr["dtype"].type), shape))
    return SignatureInfo(name="timing", inputs=tuple(specs), outputs=())


def placeholder_feeds(graph_def, input_names: Sequence[str], batch_size: int = 8,
                      seed: int = 0) -> dict[str, np.ndarray]:
    """One batch for the graph's inputs, ``{node name: array}``; unknown dims become
    ``batch_size``. Raises InvalidInputsError for an input of unknown rank."""
    signature = placeholder_specs(graph_def, input_names)
    return make_inputs(signature, batch_size, seed, infer_int_ranges(graph_def, signature),
                       unknown_dim=batch_size)


def median_run_seconds(graph_defs: Sequence, feeds: dict[str, np.ndarray],
                       fetches: Sequence[str], runs: int = 15, warmup: int = 3) -> list[float]:
    """Median wall time of one ``session.run`` for each graph, in the order given."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()

    def tensor(name: str) -> str:
        return name if ":" in name else f"{name}:0"

    sessions, callables = [], []
    try:
        for graph_def in graph_defs:
            graph = tf.Graph()
            with graph.as_default():
                tf.compat.v1.import_graph_def(graph_def, name="")
            session = tf.compat.v1.Session(graph=graph)
            sessions.append(session)
            callables.append(session.make_callable(
                [tensor(f) for f in fetches],
                feed_list=[graph.get_tensor_by_name(tensor(k)) for k in feeds]))
        values = list(feeds.values())
        for run in callables:
            for _ in range(warmup):
                run(*values)
        samples: list[list[float]] = [[] for _ in callables]
        order = list(range(len(callables)))
        for _ in range(runs):
            for i in order:
                started = time.perf_counter()
                callables[i](*values)
                samples[i].append(time.perf_counter() - started)
            order.reverse()
        return [statistics.median(s) for s in samples]
    finally:
        for session in sessions:
            session.close()
