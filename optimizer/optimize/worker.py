"""Optimize a big model in a worker process, so that the copies of its weights go back on exit.

Freezing a SavedModel, transforming the frozen graph and checking it against the source hold
several copies of the weights at once (the loaded SavedModel, the frozen GraphDef, each
transform's output, the graphs TensorFlow imports to run both sides of the check): for a
191 MiB MLP the stage peaked at 2.9 GiB, and glibc and TensorFlow keep what they took while the
process lives, so the step's process carried ~2 GiB into the candidate builds and the
benchmark, beside their own workers. :func:`optimize_in_worker` runs the stage in
``python -m tfopt.optimizer.optimize.worker_main`` instead, which:

1. freezes the source and makes the equivalence inputs from the frozen original;
2. keeps only an *outline* of the original (its graph without the constants' values: what the
   report reads) and transforms (or searches);
3. checks the candidate against the source, one model loaded at a time
   (:func:`tfopt.optimizer.verify.equivalence.compare`), the check unchanged;
4. writes the accepted candidate as a SavedModel, and its frozen graph for the candidates
   built from it (bf16, XLA), into a scratch directory; then exits.

The caller gets the same :class:`~tfopt.optimizer.optimize.flow.OptimizeResult`, whose original and
candidate graphs are :class:`OutlinedModel` s: node for node the same graphs, without the
weights. :func:`~tfopt.optimizer.optimize.flow.write_optimized` copies the written SavedModel's files, and
:func:`full_model` reads the candidate's full graph back where one is needed. The scratch
directory goes when the candidate's outline is garbage collected (or at exit).

An outline is pickled as its graph's bytes and read back with :mod:`tfopt.optimizer.model.tf_protos`, so
the caller, which only reports on it and hands it to the candidate workers, never imports
TensorFlow for it: the step's process stays at ~0.1 GiB beside its workers.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.system.worker_process import run_job

log = logging.getLogger(__name__)

RESULT_FILE = "result.pickle"
GRAPH_FILE = "optimized.pickle"
SAVEDMODEL_DIR = "savedmodel"


class OptimizeWorkerError(TfoptError):
    """The optimize worker failed unexpectedly (a bug, not a refused model)."""

    exit_code = 1


@dataclass(frozen=True)
class OutlinedModel(FrozenModel):
    """A frozen model's graph without its constants' values (dtype and shape kept).

    ``graph_bytes`` is the full graph's size; ``stored`` the pickle of the full model and
    ``written`` its SavedModel, where the worker wrote them (None: not written)."""

    graph_bytes: int = 0
    stored: str | None = None
    written: str | None = None

    @property
    def size_bytes(self) -> int:
        return self.graph_bytes

    def __reduce__(self):
        # as the graph's bytes, read back without TensorFlow where it is not imported: the
        # step's process reads the result and starts no runtime beside its workers
        return (_outline_from_bytes, (self.graph_def.SerializeToString(), self.signature,
                                      self.source, self.history, self.graph_bytes, self.stored,
                                      self.written))


def _outline_from_bytes(graph: bytes, signature, source: str, history: tuple[str, ...],
                        graph_bytes: int, stored: str | None, written: str | None
                        ) -> OutlinedModel:
    from tfopt.optimizer.model.tf_protos import graph_def_from_bytes

    return OutlinedModel(graph_def=graph_def_from_bytes(graph), signature=signature,
                         source=source, history=history, graph_bytes=graph_bytes,
                         stored=stored, written=written)


def outline(model: FrozenModel, stored: str | None = None,
            written: str | None = None) -> OutlinedModel:
    """``model`` without its constants' values: a few KB where the weights are hundreds of MB."""
    graph = type(model.graph_def)()
    graph.versions.CopyFrom(model.graph_def.versions)
    graph.library.CopyFrom(model.graph_def.library)
    for node in model.graph_def.node:
        kept = graph.node.add(name=node.name, op=node.op, input=node.input, device=node.device)
        for key, value in node.attr.items():
            if value.HasField("tensor"):
                kept.attr[key].tensor.dtype = value.tensor.dtype
                kept.attr[key].tensor.tensor_shape.CopyFrom(value.tensor.tensor_shape)
            else:
                kept.attr[key].CopyFrom(value)
    return OutlinedModel(graph_def=graph, signature=model.signature, source=model.source,
                         history=model.history, graph_bytes=model.size_bytes, stored=stored,
                         written=written)


def full_model(model: FrozenModel) -> FrozenModel:
    """``model`` itself, or the full model an outline stands for (read from its pickle)."""
    if not isinstance(model, OutlinedModel):
        return model
    if model.stored is None:
        raise OptimizeWorkerError("the optimized graph was not kept: the model was refused")
    with open(model.stored, "rb") as stored:
        return pickle.load(stored)


def copy_written(written: str | os.PathLike, dst: str | os.PathLike,
                 overwrite: bool = False) -> Path:
    """The SavedModel the worker wrote, copied file for file to ``dst`` (atomically)."""
    from tfopt.optimizer.files.atomic import atomic_directory

    with atomic_directory(dst, overwrite=overwrite) as staging:
        shutil.copytree(written, staging)
    return Path(dst)


def optimize_in_worker(source, recipe, signature_name: str, tolerance, backend,
                       search, *, policy):
    """:func:`tfopt.optimizer.optimize.flow.optimize_here` in a child process that has exited when this
    returns; the result's graphs are outlines. ``policy``, the model scan's, is part of the job:
    the child reads the source under it."""
    scratch = Path(tempfile.mkdtemp(prefix="tfopt-optimize-"))
    try:
        outcome = run_job("tfopt.optimizer.optimize.worker_main", {
            "source": str(source), "recipe": recipe, "signature": signature_name,
            "tolerance": tolerance, "backend": backend, "search": search, "policy": policy,
            "scratch": str(scratch), "log_level": logging.getLogger().getEffectiveLevel()},
            directory=scratch)
        if outcome.answer is None:
            raise OptimizeWorkerError(f"optimizing {source} in a worker process failed "
                                      f"(exit code {outcome.returncode}): "
                                      f"{outcome.last_line()}")
        answer = pickle.loads(bytes.fromhex(outcome.answer))
        if isinstance(answer, TfoptError):
            raise answer
        with open(scratch / RESULT_FILE, "rb") as stored:
            result = pickle.load(stored)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    weakref.finalize(result.candidate.model, shutil.rmtree, str(scratch), True)
    return result
