"""What the LiteRT converter reads for a model with loops: the source with its loops unrolled.

The converter cannot convert a Keras 3 LSTM or GRU as exported. Its fused-RNN path
(``UnidirectionalSequenceLSTM``) only recognises functions annotated
``api_implements="lstm_..."``, which tf.keras 2's LSTM carried and Keras 3's does not; and its
TensorList lowering needs each list's element shape static, which a dynamic batch dimension
makes it not (measured with TF 2.21: "'tf.TensorListReserve' op requires element_shape to be
static during TF Lite transformation pass", and the same with the batch fixed at 1, because the
shape is computed at run time from ``Shape`` ops). Select TF ops would run the lists, but they
need the TF runtime that a LiteRT candidate exists to avoid.

A loop whose trip count the graph fixes (a fixed sequence length) needs neither:
``unroll_static_loops`` writes it as straight-line builtin ops (MatMul, Sigmoid, Tanh, slices,
Pack) that the converter lowers and XNNPACK runs, for any batch size. So when the source's
frozen graph holds such loops, :func:`litert_source` writes the frozen graph with them unrolled
as a SavedModel, and the LiteRT candidates are converted from that. A loop that cannot be
unrolled (a data-dependent trip count, too many nodes) stays, and its reason goes with the
converter's error if conversion then fails.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.graph.functional_control_flow import WHILE_OPS
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy

log = logging.getLogger(__name__)

UNROLLED_DIR = "litert_source_unrolled"


@dataclass(frozen=True)
class LiteRTSource:
    path: Path  # the SavedModel to convert
    kept_loops: str | None  # why some loop could not be unrolled, when one could not


def litert_source(source: str | os.PathLike, signature: str,
                  workdir: str | os.PathLike, *, policy: ScanPolicy = DEFAULT_POLICY
                  ) -> LiteRTSource:
    """``source``, or the frozen source with its static loops unrolled, written under
    ``workdir`` (the directory of the candidates); ``source`` is read under ``policy``."""
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.transforms.pipeline import run_transforms
    from tfopt.optimizer.transforms.unroll_static_loops import UnrollStaticLoops

    source = Path(source)
    if not _holds_while_loops(source, policy):
        # Freezing holds several times the model's size: not worth it to find no loop.
        return LiteRTSource(source, None)
    frozen = freeze(source, signature, policy=policy)
    loops = sum(n.op in WHILE_OPS for n in frozen.graph_def.node)
    if not loops:
        return LiteRTSource(source, None)
    unrolled, _ = run_transforms(frozen, [UnrollStaticLoops()])
    kept = [n for n in unrolled.graph_def.node if n.op in WHILE_OPS]
    reasons = "; ".join(f"loop {n.name}: {_why_kept(unrolled.graph_def, n)}" for n in kept)
    if len(kept) == loops:
        return LiteRTSource(source, reasons)
    target = Path(workdir) / UNROLLED_DIR
    write_saved_model(unrolled, target, overwrite=True,
                      metadata={"purpose": "LiteRT conversion source: the source SavedModel, "
                                           "frozen, with its static loops unrolled"})
    log.info("LiteRT: converting %s with %d of its %d while loop(s) unrolled", source,
             loops - len(kept), loops)
    return LiteRTSource(target, reasons or None)


def _holds_while_loops(source: Path, policy: ScanPolicy) -> bool:
    """Whether the SavedModel's graph or any function of its library has a while loop, read
    from ``saved_model.pb`` alone (the frozen graph cannot have more)."""
    from tfopt.optimizer.model.savedmodel import (
        op_histogram,
        read_saved_model_proto,
        serving_meta_graph,
    )

    meta_graph = serving_meta_graph(read_saved_model_proto(source, policy), source)
    return any(op in WHILE_OPS for op in op_histogram(meta_graph.graph_def))


def _why_kept(graph_def, node) -> str:
    from tfopt.optimizer.graph.static_loops import NotStatic, analyse_loop
    from tfopt.optimizer.transforms.unroll_static_loops import DEFAULT_MAX_NODES

    try:
        analyse_loop(graph_def, node, DEFAULT_MAX_NODES)
    except NotStatic as reason:
        return str(reason)
    return "not unrolled"
