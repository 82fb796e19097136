"""A real ``mlflow server`` for tests: sqlite backend, artifacts served through the server.

``--serve-artifacts`` with ``--artifacts-destination`` gives new experiments an
``mlflow-artifacts:/`` root, which clients upload to and download from over the server's HTTP
API, like pods that share no disk with it. A test module declares
``pytest_plugins = ["mlflow_server"]`` and takes a ``mlflow_server`` argument (the tracking
URI); each module gets its own server and database. It binds 127.0.0.1 on a free port, and the test fails, showing the server's log,
if ``/health`` does not answer within ``STARTUP_SECONDS`` (about 25 s was measured on a loaded
2-core machine: sqlite schema migrations and the uvicorn start).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from local_ports import free_port
from process_groups import stop_groups

STARTUP_SECONDS = 90
STOP_SECONDS = 15


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _log_tail(log_path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen) -> None:
    # The server runs uvicorn and a job runner as children, in the session it was started in
    # (its pid is the group id): signal the group, so that no child outlives the test.
    stop_groups([process], STOP_SECONDS)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """The tracking URI (``http://127.0.0.1:<port>``) of a fresh server, stopped after."""
    root = tmp_path_factory.mktemp("mlflow_server")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = root / "server.log"
    mlflow = Path(sys.executable).parent / "mlflow"
    command = [str(mlflow), "server",
               "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
               "--serve-artifacts", "--artifacts-destination", str(root / "artifacts"),
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    # The job runner (GenAI scorers; unused here) keeps seven huey consumers polling: most of
    # a core on a 2-core machine, and seconds of startup.
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # the tests' own client too
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root,
                                   env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _healthy(url):
            if process.poll() is not None:
                pytest.fail(f"mlflow server exited with code {process.returncode} before "
                            f"answering on {url}:\n{_log_tail(log_path)}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not answer {url}/health within "
                            f"{STARTUP_SECONDS} s:\n{_log_tail(log_path)}", pytrace=False)
            time.sleep(0.5)
        yield url
    finally:
        _stop(process)
