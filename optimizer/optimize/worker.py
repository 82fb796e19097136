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
candidate graphs are :class:`~tfopt.optimizer.model.outline.OutlinedModel` s: node for node the same graphs, without the
weights. :func:`~tfopt.optimizer.optimize.flow.write_optimized` copies the written SavedModel's files, and
:func:`~tfopt.optimizer.model.outline.full_model` reads the candidate's full graph back where one is needed. The scratch
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
from pathlib import Path

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.system.worker_process import run_job

log = logging.getLogger(__name__)

RESULT_FILE = "result.pickle"
GRAPH_FILE = "optimized.pickle"
SAVEDMODEL_DIR = "savedmodel"


class OptimizeWorkerError(TfoptError):
    """The optimize worker failed unexpectedly (a bug, not a refused model)."""

    exit_code = 1


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
