"""The candidate worker process: ``python -m tfopt.optimizer.candidates.worker_main JOB ANSWER``.

Started by :func:`tfopt.optimizer.candidates.worker.build_in_worker`, not by people: it builds the
job's candidates with :func:`tfopt.optimizer.candidates.build.build_candidates`, as the step's process
would, and answers with what it made and what it skipped.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from tfopt.optimizer.candidates.build import build_candidates
from tfopt.optimizer.system.worker_process import read_job


def main(argv: Sequence[str]) -> int:
    """The worker: read the job, build, write the answer."""
    job, write_answer = read_job(argv)
    logging.basicConfig(level=job["log_level"], format="%(message)s", stream=sys.stderr)
    made, skipped = build_candidates(
        job["source"], job["optimized"], Path(job["workdir"]), job["settings"], job["labels"],
        signature=job["signature"], calibration=job["calibration"],
        source_digest=job["source_digest"], policy=job["policy"], measure_flavours=True)
    write_answer(json.dumps({"made": [c.to_dict() for c in made],
                             "skipped": [s.to_dict() for s in skipped]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
