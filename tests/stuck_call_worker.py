"""A :func:`~tfopt.optimizer.system.worker_process.run_job` worker for tests whose model call never
returns: it sleeps under the deadline its parent passed on (``tfopt.optimizer.runtime.call_deadline``),
as a native call that never gives its thread back would, and answers only if it wakes."""

import sys
import time

from tfopt.optimizer.runtime.call_deadline import current, deadline, past_deadline_line
from tfopt.optimizer.system.worker_process import read_job

if __name__ == "__main__":
    job, write_answer = read_job(sys.argv[1:])
    seconds = current().seconds(None)
    with deadline(seconds, past_deadline_line("a stuck model", seconds)):
        time.sleep(job["sleep"])
    write_answer("returned")
