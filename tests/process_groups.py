"""Stopping a server a test started, with every child it started, by its process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def stop_groups(processes: list[subprocess.Popen], grace_seconds: float) -> None:
    """SIGTERM to each process's group (started with ``start_new_session``), then SIGKILL to
    what is left after ``grace_seconds``; each process is reaped."""
    for process in processes:
        signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for process in processes:
        while group_alive(process.pid) and time.monotonic() < deadline:
            process.poll()  # reap the leader, so that its group can empty
            time.sleep(0.2)
        signal_group(process.pid, signal.SIGKILL)
        process.wait(grace_seconds)
