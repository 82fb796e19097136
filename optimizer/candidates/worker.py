"""Build candidates in a worker process of their own, so that their memory goes back on exit.

Converting a model (the LiteRT converter, tf2onnx, OpenVINO's ``convert_model``), tracing it
for XLA or retyping it for bf16 holds several times the model's size, and TensorFlow's runtime
keeps what it took until its process ends. Built in the step's process, the candidates would
pile up: the measured peak of ``tfopt optimize --targets savedmodel,litert`` on a 200 MB MLP
was 8.9 GiB where converting it by hand took 1.3 GiB. So :func:`build_in_worker` runs
``python -m tfopt.optimizer.candidates.worker_main`` for one candidate (or the flavours that share one
conversion) and returns once it has written its artifacts and exited: the next build starts
from the parent's own memory.

The job (the source path, the optimized graph, the settings and the calibration feeds) goes to
the worker as a pickle in the candidates' work directory (:func:`tfopt.optimizer.system.worker_process.run_job`).
A candidate the worker refuses is skipped with its one-line reason, as in-process. A worker whose
process tree takes this process's over the memory budget is stopped by the watchdog
(:mod:`tfopt.optimizer.system.memory_watchdog`) and its candidates skipped with "stopped at X GiB, over
the memory budget of Y GiB"; one killed by a signal all the same (an OOM killer acting on a
limit tfopt was not told of) skips its candidates with that reason. Neither takes the step
down.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Sequence
from pathlib import Path

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget
from tfopt.optimizer.system.worker_process import run_job

log = logging.getLogger(__name__)


class CandidateWorkerError(TfoptError):
    """A candidate worker failed unexpectedly (a bug, not a refused candidate)."""

    exit_code = 1


def build_in_worker(source, optimized, workdir: Path, settings, labels: Sequence[str], *,
                    signature: str, calibration, source_digest: str | None, policy,
                    budget: MemoryBudget | None = None):
    """``(made, skipped)`` for ``labels``, built by a child process that has exited when this
    returns (:func:`tfopt.optimizer.candidates.build.build_candidates` runs there, reading the source
    under ``policy``, the model scan's, which the job carries). With a memory ``budget``, the
    worker is stopped once this process's tree crosses it
    (:mod:`tfopt.optimizer.system.memory_watchdog`), and its candidates skipped with the figure."""
    from tfopt.optimizer.candidates.candidate import Candidate, Skipped

    outcome = run_job("tfopt.optimizer.candidates.worker_main", {
        "source": str(source), "optimized": optimized, "workdir": str(workdir),
        "settings": settings, "labels": list(labels), "signature": signature,
        "calibration": calibration, "source_digest": source_digest, "policy": policy,
        "log_level": logging.getLogger().getEffectiveLevel()}, directory=workdir,
        memory_limit=budget.bytes if budget else None)
    if outcome.peak_bytes is not None:
        log.info("candidates: the worker building %s peaked at %.2f GiB (its process tree)",
                 ", ".join(labels), outcome.peak_bytes / GIB)
    if outcome.stopped_at_bytes is not None:
        reason = (f"stopped at {outcome.stopped_at_bytes / GIB:.2f} GiB, over the memory "
                  f"budget of {budget.describe()}")
    elif outcome.returncode < 0:
        killer = signal.Signals(-outcome.returncode)
        reason = (f"its worker process was killed by {killer.name}"
                  + (" (out of memory?)" if killer == signal.SIGKILL else ""))
    else:
        reason = None
    if reason is not None:
        log.warning("candidates: %s skipped: %s", ", ".join(labels), reason)
        return [], [Skipped(label, reason) for label in labels]
    if outcome.returncode != 0 or outcome.answer is None:
        raise CandidateWorkerError(f"the worker building {', '.join(labels)} exited with code "
                                   f"{outcome.returncode}: {outcome.last_line()}")
    answer = json.loads(outcome.answer)
    return ([Candidate.from_dict(c) for c in answer["made"]],
            [Skipped(**s) for s in answer["skipped"]])
