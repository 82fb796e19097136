"""A real ``mlflow server`` for tests: sqlite backend, artifacts served through the server.

``--serve-artifacts`` with ``--artifacts-destination`` gives new experiments an
``mlflow-artifacts:/`` root, which clients upload to and download from over the server's HTTP
API, like pods that share no disk with it. A test module declares
``pytest_plugins = ["mlflow_server"]`` and takes a ``mlflow_server`` argument (the tracking
URI); each module gets its own server and database. It binds 127.0.0.1 on a free port, and the test fails, showing the server's log,
if ``/health`` does not answer within ``STARTUP_SECONDS`` (about 25 s was measured on a loaded
2-core machine: sqlite schema migrations and the uvicorn start). The server runs uvicorn and
a job runner as children, in its own process group, which is stopped whole
(tests/served_process.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from local_ports import free_port
from served_process import served

STARTUP_SECONDS = 90


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """The tracking URI (``http://127.0.0.1:<port>``) of a fresh server, stopped after."""
    root = tmp_path_factory.mktemp("mlflow_server")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
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
    with served(command, f"{url}/health", root / "server.log", STARTUP_SECONDS, cwd=root,
                env=env):
        yield url
