"""A publish SIGKILLed at a real point inside its conversation with MLflow, then run again.

``tfopt step publish`` runs as its own process against a real mlflow server, through
tests/fault_proxy.py, which holds one chosen request: the upload of the model's files (into its
logged model), the
version's creation (before the server sees it, or after the server made the version but before
its answer), the alias move, the tag that marks the run logged. Once the process is blocked
there, it is killed with SIGKILL, as the OOM killer or a lost node would. The same DAG run is
then published again, with nothing held, and the registry must end with exactly one run and one
version for it, the alias on that version.
"""

import json
import signal

import pytest
from fault_proxy import FaultProxy
from mlflow import MlflowClient
from mlflow.entities import LoggedModelStatus

from tfopt.components.config.pipeline_config import load_config
from tfopt.components.pipeline.step_runner import run_step

pytest_plugins = ["mlflow_server", "publish_inputs"]

RUN_ID = "scheduled__2025-03-01T03:00:00+00:00"
API = "/api/2.0/mlflow"
KILL_POINTS = {
    # name: (fault, method, path held, (versions, alias) the kill leaves in the registry)
    "uploading_the_model": ("stall", "PUT",
                            r"/mlflow-artifacts/artifacts/.*/models/m-[0-9a-f]+/artifacts/",
                            (0, None)),
    "marking_the_run_logged": ("stall_after_forward", "POST", rf"{API}/runs/set-tag$",
                               (0, None)),
    "creating_the_version_unseen": ("stall", "POST", rf"{API}/model-versions/create$",
                                    (0, None)),
    "creating_the_version_unanswered": ("stall_after_forward", "POST",
                                        rf"{API}/model-versions/create$", (1, None)),
    "moving_the_alias": ("stall_after_forward", "POST", rf"{API}/registered-models/alias$",
                         (1, "1")),
}


@pytest.fixture(scope="module")
def proxy(mlflow_server):
    with FaultProxy(mlflow_server) as running:
        yield running


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_publish_killed_midway_is_completed_by_the_rerun_without_duplicates(
        publish_inputs, mlflow_server, proxy, tmp_path, point):
    fault, method, path, (versions_left, alias_left) = KILL_POINTS[point]
    name = f"crash-{point}"
    config = publish_inputs.config(tmp_path, proxy.url, name)
    client = MlflowClient(mlflow_server, registry_uri=mlflow_server)
    proxy.add(fault, path, method=method, times=1)

    process = publish_inputs.start(config, RUN_ID)
    try:
        held = proxy.wait_for_stall(timeout=180)
    finally:
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=60)
    proxy.clear()
    proxy.release()
    assert held, f"publish never reached {method} {path}; it exited {process.returncode}: {err}"
    assert process.returncode == -signal.SIGKILL
    experiment = client.get_experiment_by_name(f"exp-{name}")
    [killed_run] = client.search_runs([experiment.experiment_id])
    assert killed_run.info.status == "RUNNING"  # killed, never finished
    assert len(client.search_model_versions(f"name = '{name}'")) == versions_left
    if versions_left:
        assert client.get_registered_model(name).aliases.get("champion") == alias_left

    rerun = run_step("publish", load_config(config),
                     json.loads(publish_inputs.inputs_file.read_text()), {"dag_run_id": RUN_ID})

    [run] = client.search_runs([experiment.experiment_id])
    [version] = client.search_model_versions(f"name = '{name}'")
    assert run.info.status == "FINISHED" and run.data.tags["tfopt.logged"] == "true"
    assert run.data.tags["tfopt.dag_run_id"] == RUN_ID
    assert (rerun["run_id"], rerun["version"]) == (run.info.run_id, version.version)
    assert version.run_id == run.info.run_id and version.tags["tfopt.dag_run_id"] == RUN_ID
    assert client.get_registered_model(name).aliases == {"champion": version.version}
    [model] = client.search_logged_models([experiment.experiment_id])
    assert model.status == LoggedModelStatus.READY and version.source == model.artifact_location
    saved_model = {f"saved_model/{p.relative_to(publish_inputs.root / 'optimized').as_posix()}"
                   for p in (publish_inputs.root / "optimized").rglob("*") if p.is_file()}
    assert saved_model | {"MLmodel", "requirements.txt"} <= _files(client, model.model_id)


def _files(client, model_id, path=None) -> set[str]:
    found = set()
    for item in client.list_logged_model_artifacts(model_id, path):
        found |= _files(client, model_id, item.path) if item.is_dir else {item.path}
    return found

