"""The optimize worker process: ``python -m tfopt.optimizer.optimize.worker_main JOB ANSWER``.

Started by :func:`tfopt.optimizer.optimize.worker.optimize_in_worker`, not by people: it optimizes
the model as :func:`tfopt.optimizer.optimize.flow.optimize_here` does, keeping outlines of its
graphs, and writes the result and the accepted candidate into the job's scratch directory. The
classes pickled for the parent are :mod:`tfopt.optimizer.optimize.worker`'s, which this module
imports under their own name.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.optimize.flow import optimize_here
from tfopt.optimizer.optimize.worker import (
    GRAPH_FILE,
    RESULT_FILE,
    SAVEDMODEL_DIR,
    OptimizeWorkerError,
    outline,
)
from tfopt.optimizer.system.worker_process import read_job


def _optimize(job: dict):
    from tfopt.optimizer.system.free_memory import return_freed_memory

    scratch = Path(job["scratch"])
    result = optimize_here(job["source"], job["recipe"], job["signature"], job["tolerance"],
                           job["backend"], job["search"], on_frozen=outline,
                           policy=job["policy"])
    candidate = result.candidate.model
    stored = written = None
    if result.accepted:
        from tfopt.optimizer.model.export import write_saved_model

        return_freed_memory()
        written = write_saved_model(candidate, scratch / SAVEDMODEL_DIR,
                                    metadata=result.provenance())
        stored = scratch / GRAPH_FILE
        with open(stored, "wb") as out:
            pickle.dump(candidate, out, protocol=pickle.HIGHEST_PROTOCOL)
    lean = dataclasses.replace(result, candidate=dataclasses.replace(
        result.candidate, model=outline(candidate, str(stored) if stored else None,
                                        str(written) if written else None)))
    with open(scratch / RESULT_FILE, "wb") as out:
        pickle.dump(lean, out, protocol=pickle.HIGHEST_PROTOCOL)


def _portable(error: TfoptError) -> bytes:
    """``error`` pickled, or, where its class cannot be rebuilt from its arguments, its line
    and exit code in an :class:`OptimizeWorkerError`."""
    from tfopt.optimizer.errors import first_line

    try:
        data = pickle.dumps(error)
        pickle.loads(data)
        return data
    except Exception:  # noqa: BLE001 - any failure to round-trip means: send the line
        plain = OptimizeWorkerError(first_line(error))
        plain.exit_code = error.exit_code
        return pickle.dumps(plain)


def main(argv: Sequence[str]) -> int:
    """The worker: read the job, optimize, write the result; a refusal (a TfoptError) goes
    back to the parent as the answer, to be raised there."""
    job, write_answer = read_job(argv)
    logging.basicConfig(level=job["log_level"], format="%(message)s", stream=sys.stderr)
    try:
        _optimize(job)
    except TfoptError as exc:
        write_answer(_portable(exc).hex())
        return exc.exit_code
    write_answer(pickle.dumps(None).hex())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
