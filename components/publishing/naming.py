"""What a publish is keyed by: the step's name for a DAG run, the gate's record it publishes,
and the MLflow server as it reports itself (not the URL it is reached at)."""

from __future__ import annotations

import hashlib
import json
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


def gate_identity(gate) -> str:
    """A digest of the gate's record (:class:`tfopt.components.pipeline.artifacts.GateOutput`): the verdict a
    publish reports. A gate that judged again, against another baseline (a rerun without a DAG
    run id, after a promotion made a new champion), is another publish with a run of its own,
    never a reuse of the one before with its verdict and alias move."""
    blob = json.dumps(gate.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
