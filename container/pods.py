"""The pods the DAG's Kubernetes mode creates, rendered as Airflow renders them, run by podman.

No Kubernetes runs here (no API server or kubelet in the reachable registries), so a step's pod
is run by ``podman kube play``: the Pod object the DAG's KubernetesPodOperator task builds
(``build_pod_request_obj``) after Airflow's templating (``ti.xcom_pull`` of the earlier steps'
outputs, ``dag_run.conf``, ``run_id``), with the image, command, arguments, env, resources and
volume mounts as rendered. What a cluster provides differently is swapped in, and only that
(:func:`for_podman`):

- the ``xcom`` emptyDir, read by the operator's sidecar (whose image cannot be pulled here),
  becomes a host directory the runner reads ``return.json`` from, as the sidecar would;
- the config's ConfigMap becomes a read-only host directory holding the same file;
- the work PVC is a podman named volume of the claim's name (kube play's own mapping), owned by
  the image's uid 10001 as a provisioner with ``fsGroup`` would leave it;
- ``hostNetwork``: the services (S3, MLflow) are on the host's 127.0.0.1, where a cluster would
  give them DNS names;
- ``extra_env``: what a cluster's Secret would inject (the S3 credentials).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CONTAINER_DIR = REPO / "container"
XCOM_VOLUME = "xcom"  # the operator's emptyDir for /airflow/xcom
SIDECAR = "airflow-xcom-sidecar"
IMAGE_UID = 10001
# podman's exit code for a container the kernel's OOM killer ended (128 + SIGKILL)
EXIT_KILLED = 137


def podman_env() -> dict[str, str]:
    """The environment podman runs in: this project's containers.conf and storage.conf."""
    return {**os.environ,
            "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF",
                                              str(CONTAINER_DIR / "containers.conf")),
            "CONTAINERS_STORAGE_CONF": os.environ.get("CONTAINERS_STORAGE_CONF",
                                                      str(CONTAINER_DIR / "storage.conf"))}


def podman(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=podman_env(), check=check, text=True,
                          capture_output=True, **kwargs)


def load_dag(config_file: Path, airflow_home: Path):
    """The ``model_optimization`` DAG as Airflow parses it, on ``config_file``."""
    os.environ.update({"AIRFLOW_HOME": str(airflow_home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                       "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                       "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
                       "TFOPT_PIPELINE_CONFIG": str(config_file)})
    import airflow.sdk  # noqa: F401 - loaded before a DAG file is parsed, as the scheduler does
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    if bag.import_errors:
        raise RuntimeError(f"the DAG does not parse: {bag.import_errors}")
    return bag.dags["model_optimization"]


def step_order(dag) -> list[str]:
    """The DAG's tasks in an order that runs each after the tasks it waits for."""
    return [task.task_id for task in dag.topological_sort()]


def render_pod(dag, task_id: str, outputs: Mapping[str, Any], run_id: str,
               conf: Mapping[str, Any] | None = None,
               asset_events: Mapping[str, list] | None = None) -> dict:
    """The Pod task ``task_id`` would create, as a Kubernetes object (a dict), after Airflow's
    templating with the earlier steps' ``outputs`` as their XComs. ``asset_events``: the run's
    ``triggering_asset_events`` (asset -> events, each with its ``extra``); none for a manual or
    scheduled run, as here."""
    from kubernetes.client import ApiClient

    task = copy.copy(dag.get_task(task_id))  # rendering fills template fields in place
    for field in task.template_fields:
        setattr(task, field, copy.deepcopy(getattr(task, field)))
    context = {"ti": SimpleNamespace(xcom_pull=lambda task_ids: outputs[task_ids]),
               "dag_run": SimpleNamespace(conf=dict(conf or {})), "run_id": run_id,
               "triggering_asset_events": dict(asset_events or {})}
    task.render_template_fields(context, dag.get_template_env())
    return ApiClient().sanitize_for_serialization(task.build_pod_request_obj(dry_run=True))


def for_podman(pod: dict, xcom_dir: Path, config_dir: Path,
               extra_env: Mapping[str, str] | None = None) -> dict:
    """The rendered pod with what a cluster provides replaced by local stand-ins (module doc)."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] != SIDECAR]
    spec["hostNetwork"] = True
    for volume in spec["volumes"]:
        if volume["name"] == XCOM_VOLUME:
            volume.pop("emptyDir", None)
            volume["hostPath"] = {"path": str(xcom_dir), "type": "Directory"}
        elif "configMap" in volume:
            volume.pop("configMap")
            volume["hostPath"] = {"path": str(config_dir), "type": "Directory"}
    main = spec["containers"][0]
    main["env"] = list(main.get("env") or []) + [
        {"name": key, "value": value} for key, value in (extra_env or {}).items()]
    return pod


@dataclass(frozen=True)
class PodResult:
    name: str
    exit_code: int
    oom_killed: bool
    output: dict | None  # return.json, the step's XCom
    log: str

    def failure(self) -> str | None:
        """One line for a pod that failed, naming an OOM kill as such; None when it passed."""
        if self.exit_code == 0 and self.output is not None:
            return None
        # Podman 4.3 on cgroups v1 does not always set OOMKilled; exit 137 (SIGKILL) is what
        # the kernel's OOM killer leaves, as Kubernetes' OOMKilled reason is.
        if self.oom_killed or self.exit_code == EXIT_KILLED:
            return (f"{self.name}: killed by the kernel (exit {self.exit_code}, SIGKILL"
                    f"{', OOMKilled' if self.oom_killed else ''}): the step used more than its "
                    f"pod's memory limit; raise resources.pod_memory_gb for it")
        last = self.log.strip().splitlines()[-1:] or ["(no output)"]
        return f"{self.name}: exit {self.exit_code}: {last[0]}"


def ensure_work_volume(name: str) -> None:
    """The PVC's stand-in: a named volume writable by the image's user."""
    if podman("volume", "exists", name, check=False).returncode != 0:
        podman("volume", "create", name)
    mountpoint = podman("volume", "inspect", "--format", "{{.Mountpoint}}", name).stdout.strip()
    os.chown(mountpoint, IMAGE_UID, IMAGE_UID)


def run_pod(pod: dict, spec_dir: Path, timeout: float = 3600) -> PodResult:
    """``podman kube play`` the pod, wait for its container, collect its exit and XCom."""
    name = pod["metadata"]["name"]
    container = f"{name}-{pod['spec']['containers'][0]['name']}"
    xcom_dir = Path(next(v["hostPath"]["path"] for v in pod["spec"]["volumes"]
                         if v["name"] == XCOM_VOLUME))
    xcom_dir.mkdir(parents=True, exist_ok=True)
    os.chown(xcom_dir, IMAGE_UID, IMAGE_UID)
    (xcom_dir / "return.json").unlink(missing_ok=True)
    spec_file = spec_dir / f"{name}.yaml"
    spec_file.write_text(json.dumps(pod, indent=1))
    podman("kube", "play", "--replace", str(spec_file))
    try:
        exit_code = int(podman("wait", container, timeout=timeout).stdout.strip())
        state = json.loads(podman("inspect", "--format", "{{json .State}}", container).stdout)
        logs = podman("logs", container)
        log = logs.stderr + logs.stdout  # the step's stderr (its progress), then its stdout
    finally:
        podman("kube", "down", str(spec_file), check=False)
    result_file = xcom_dir / "return.json"
    output = json.loads(result_file.read_text()) if result_file.exists() else None
    return PodResult(name, exit_code, bool(state.get("OOMKilled")), output, log)


def image_present(image: str) -> bool:
    try:
        return podman("image", "exists", image, check=False).returncode == 0
    except FileNotFoundError:
        return False


def image_sources(image: str) -> str:
    """The sources digest the image was built from (its ``tfopt.sources`` label; empty for an
    image built before the label existed)."""
    from container.source_digest import LABEL

    done = podman("image", "inspect", "--format", f'{{{{ index .Labels "{LABEL}" }}}}', image,
                  check=False)
    value = done.stdout.strip() if done.returncode == 0 else ""
    return "" if value == "<no value>" else value


RENDERED = "POD "  # prefixes the rendered pod's line: Airflow logs to stdout too


if __name__ == "__main__":  # render one pod: python -m container.pods CONFIG TASK [AIRFLOW_HOME]
    dag = load_dag(Path(sys.argv[1]).resolve(), Path(sys.argv[3] if len(sys.argv) > 3
                                                      else "work/pod-demo/airflow").resolve())
    print(RENDERED + json.dumps(render_pod(dag, sys.argv[2], {}, "manual")))
