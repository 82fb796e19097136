"""The simplification stage: every rewrite of the registry in turn, repeated until a round
changes nothing."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from tfopt.optimizer.candidates.onnx.rewrites.base import Rewrite, apply_rewrite
from tfopt.optimizer.candidates.onnx.rewrites.registry import REWRITES

log = logging.getLogger(__name__)

MAX_ROUNDS = 10  # each round that changes something removes nodes; this only bounds a bug


@dataclass(frozen=True)
class Simplified:
    model: onnx.ModelProto
    fired: tuple[str, ...]  # the rewrites that changed the graph, in the order they first did
    nodes_before: int
    nodes_after: int


def simplify(model: onnx.ModelProto,
             rewrites: Sequence[Rewrite] = REWRITES) -> Simplified:
    """``model`` with ``rewrites`` applied until none changes it; ``model`` is not modified."""
    current, fired = model, []
    for _ in range(MAX_ROUNDS):
        changed = False
        for rewrite in rewrites:
            result = apply_rewrite(rewrite, current)
            if result is not current:
                changed = True
                if rewrite.name not in fired:
                    fired.append(rewrite.name)
                current = result
        if not changed:
            break
    simplified = Simplified(current, tuple(fired), len(model.graph.node),
                            len(current.graph.node))
    log.info("ONNX graph simplification: %d -> %d nodes (%s)", simplified.nodes_before,
             simplified.nodes_after, ", ".join(fired) or "nothing to rewrite")
    return simplified
