"""What a publish is keyed by in the workspace: the step's name for a DAG run, and the MLflow
server as it reports itself (not the URL it is reached at)."""

from __future__ import annotations

import hashlib
import re
from typing import Any


def step_name(run_context: dict[str, Any] | None) -> str:
    """``publish``, or ``publish/<DAG run id as a file name>-<its hash>`` in a DAG run: one
    finished record per DAG run, whatever characters its id holds."""
    dag_run_id = (run_context or {}).get("dag_run_id")
    if not dag_run_id:
        return "publish"
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", str(dag_run_id))[:80]
    return f"publish/{slug}-{hashlib.sha256(str(dag_run_id).encode()).hexdigest()[:8]}"


def server_identity(client, experiment: str) -> str:
    """The MLflow server as it reports itself, not the URL it is reached at: the experiment's
    id and creation time (another server's experiment of the same name has another), and the
    registered model's name. ``localhost`` and ``127.0.0.1`` give the same identity."""
    found = client.get_experiment(experiment)
    return f"{found.experiment_id}:{found.creation_time}"
