"""A real Airflow for tests: api-server, scheduler, dag-processor and triggerer on 127.0.0.1.

Each component is its own process in its own session, started the way a deployment starts it
(``airflow <component>``), on SQLite with the LocalExecutor, and stopped by its PID's process
group. The REST API is reached with a JWT from ``/auth/token``, as a training job would reach
it, for a user of the simple auth manager whose password the test sets.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from airflow_testing import airflow_env
from local_ports import free_port
from process_groups import stop_groups

AIRFLOW = Path(sys.executable).parent / "airflow"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
USER, PASSWORD = "trainer", "trainer-secret"
STARTUP_SECONDS = 240
STOP_SECONDS = 20


class AirflowApiError(AssertionError):
    pass


@dataclass
class Airflow:
    home: Path
    url: str
    env: dict[str, str]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    _token: str | None = None

    # --- the REST API, as a training job calls it ---------------------------------------

    def request(self, method: str, path: str, body: dict | None = None,
                token: bool = True) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise AirflowApiError(f"{method} {path}: HTTP {exc.code}: "
                                  f"{exc.read().decode()[:500]}") from None
        return json.loads(text) if text else {}

    def token(self) -> str:
        if self._token is None:
            answer = self.request("POST", "/auth/token",
                                  {"username": USER, "password": PASSWORD}, token=False)
            self._token = answer["access_token"]
        return self._token

    def dag_runs(self, dag_id: str) -> list[dict]:
        return self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]

    def wait_for(self, what: str, check, timeout: float, interval: float = 0.5):
        """Poll ``check()`` until it returns something truthy; fail naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            self.assert_running()
            try:
                found = check()
            except (AirflowApiError, OSError):
                found = None
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"Airflow: {what} within {timeout:.0f}s\n{self.logs()}")
            time.sleep(interval)

    # --- processes --------------------------------------------------------------------

    def assert_running(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"airflow {name} exited with {process.returncode}\n"
                                     f"{self.logs()}")

    def logs(self, lines: int = 25) -> str:
        out = []
        for name in self.processes:
            path = self.home / f"{name}.log"
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() \
                else ["(no log)"]
            out.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        stop_groups(list(self.processes.values()), STOP_SECONDS)


def start_airflow(home: Path, config: Path, extra_env: dict[str, str] | None = None) -> Airflow:
    """Migrate a fresh SQLite database and start every component; returns once the API answers.

    The caller stops it (:meth:`Airflow.stop`), also when the test fails.
    """
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    passwords = home / "simple_auth_manager_passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    env = {**airflow_env(home, config),
           "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
           "AIRFLOW__CORE__PARALLELISM": "2",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
           "AIRFLOW__API__HOST": "127.0.0.1",
           "AIRFLOW__API__PORT": str(port),
           "AIRFLOW__API__BASE_URL": url,
           # Tasks report to the execution API; it is on this api-server's port.
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
           "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
           "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
           "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
           "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
           **(extra_env or {})}
    subprocess.run([str(AIRFLOW), "db", "migrate"], check=True, env=env, cwd=home,
                   capture_output=True, timeout=600)
    airflow = Airflow(home=home, url=url, env=env)
    try:
        for name in COMPONENTS:
            with open(home / f"{name}.log", "wb") as log:
                airflow.processes[name] = subprocess.Popen(
                    [str(AIRFLOW), name], env=env, cwd=home, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True)
        airflow.wait_for("the API did not answer /api/v2/monitor/health",
                         lambda: airflow.request("GET", "/api/v2/monitor/health", token=False),
                         STARTUP_SECONDS)
    except BaseException:
        airflow.stop()
        raise
    return airflow
