"""unroll_static_loops: a While loop with a constant trip count becomes straight-line ops.

A recurrent layer over a fixed sequence length (a Keras LSTM or GRU on inputs of length 20)
runs its step function in a ``While`` loop whose trip count the frozen graph's constants fix.
Unrolled, the loop is ``trips`` copies of its body (:mod:`tfopt.optimizer.graph.static_loops`), its
per-step TensorList reads and writes become slices and a Pack
(:mod:`tfopt.optimizer.graph.tensor_lists`), and nothing is left of the loop machinery: the executor
runs no frame per step, Grappler and oneDNN fuse across steps, the LiteRT converter sees only
builtin ops, and a later rewrite (the substitution search) sees every step. The outputs are
the same to the last bit: the same ops run on the same values.

A loop stays a loop, with a warning naming it and why, when:

- its trip count is data-dependent (the condition reads a value computed from the inputs, e.g.
  a ``tf.while_loop`` bounded by an input);
- unrolled, it would add more than ``max_nodes`` nodes (trips x body size);
- its body runs a stateful op (random, I/O), whose order across steps the loop guarantees;
- its cond or body cannot be read as a graph.

Loops nested in a loop body or a cond branch are not unrolled (the body is copied with them).
The cond and body functions of the unrolled loops leave the library.
"""

from __future__ import annotations

import logging

from tfopt.optimizer.graph.functional_control_flow import WHILE_OPS, prune_unreachable_functions
from tfopt.optimizer.graph.static_loops import NotStatic, analyse_loop, unroll_loop
from tfopt.optimizer.graph.tensor_lists import simplify_tensor_lists
from tfopt.optimizer.transforms.base import Param, Transform, TransformContext

log = logging.getLogger(__name__)

DEFAULT_MAX_NODES = 5000


class UnrollStaticLoops(Transform):
    name = "unroll_static_loops"
    rewrites_function_bodies = True
    params = (
        Param("max_nodes", int, DEFAULT_MAX_NODES,
              "most nodes one unrolled loop may add (trips x body nodes); a longer loop "
              "stays a loop, with a warning"),
    )

    def transform(self, graph_def, context: TransformContext):
        unrolled = 0
        for name in [n.name for n in graph_def.node if n.op in WHILE_OPS]:
            node = next(n for n in graph_def.node if n.name == name)
            loop = static_loop(graph_def, node, self["max_nodes"])
            if loop is None:
                continue
            added = unroll_loop(graph_def, loop, context.boundary)
            log.info("unroll_static_loops: %s: %d trips, %+d nodes", name, loop.trips, added)
            unrolled += 1
        if unrolled:
            simplify_tensor_lists(graph_def, context.boundary)
            prune_unreachable_functions(graph_def)
        return graph_def


def static_loop(graph_def, node, max_nodes: int):
    """:func:`analyse_loop`'s result, or None with a warning saying why the loop stays."""
    try:
        return analyse_loop(graph_def, node, max_nodes)
    except NotStatic as reason:
        log.warning("unroll_static_loops: keeping loop %s: %s", node.name, reason)
        return None
