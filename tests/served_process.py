"""A server a test starts as its own process group, waited for until it answers, stopped after.

The process runs in a new session (its pid is its group id), so stopping it signals every child
it started (uvicorn workers, job runners); the test fails, showing the server's log, if it exits
or is not ready (``health_url`` answers 200, or answers at all) within ``startup_seconds``.
Used for the mlflow server (tests/mlflow_server.py), moto (tests/s3_server.py) and
``mlflow models serve``.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from process_groups import stop_groups

STOP_SECONDS = 15


def answers(url: str) -> bool:
    """``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def responds(url: str) -> bool:
    """``url`` answers at all: any HTTP status means the server is up."""
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def log_tail(log_path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def served(command: list[str], health_url: str, log_path: Path, startup_seconds: float,
           ready: Callable[[str], bool] = answers, **popen) -> Iterator[subprocess.Popen]:
    """``command`` running until the block ends, once ``ready(health_url)``. Its output goes
    to ``log_path``: a pipe nobody reads would fill up and stall the server."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, **popen)
    try:
        deadline = time.monotonic() + startup_seconds
        while not ready(health_url):
            if process.poll() is not None:
                pytest.fail(f"{Path(command[0]).name} exited with code {process.returncode} "
                            f"before answering {health_url}:\n{log_tail(log_path)}",
                            pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"{Path(command[0]).name} did not answer {health_url} within "
                            f"{startup_seconds} s:\n{log_tail(log_path)}", pytrace=False)
            time.sleep(0.5)
        yield process
    finally:
        stop_groups([process], STOP_SECONDS)
