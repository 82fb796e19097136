"""A step of the DAG's Kubernetes mode, run as the very pod the DAG renders, in the image.

The pull task's Pod (KubernetesPodOperator.build_pod_request_obj after Airflow's templating)
runs under ``podman kube play`` with its CPU and memory limits, the work volume as a named
volume, against moto's S3 on the host: its XCom is the step's output, and the entrypoint sized
the threads from the pod's CPU limit. Needs podman and the image (``make image``); skipped with
the reason otherwise. `make pod-demo` runs every step this way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from model_zoo import keras_cnn
from s3_server import moto_endpoint_fixture, s3_fixture  # noqa: F401 - fixtures by name

from container.pods import (
    RENDERED,
    REPO,
    for_podman,
    image_present,
    image_sources,
    podman,
    run_pod,
)
from container.source_digest import sources_digest
from tfopt.components.pipeline.step_runner import POD_MEMORY_KEY

pytestmark = pytest.mark.slow
IMAGE = os.environ.get("TFOPT_IMAGE", "tfopt:0.1.0")


def _why_not_runnable() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (`make image` installs it)"
    if os.geteuid() != 0:
        return "the pod's volumes are chowned to the image's uid: run as root (rootful podman)"
    if not image_present(IMAGE):
        return f"the image {IMAGE} is not in podman's storage: build it with `make image`"
    built_from, here = image_sources(IMAGE), sources_digest()
    if built_from != here:
        return (f"the image {IMAGE} was built from other sources ({built_from or 'unlabelled'}) "
                f"than this checkout's ({here}): rebuild it with `make image`")
    return None


@pytest.fixture
def pod_runnable():
    reason = _why_not_runnable()
    if reason:
        pytest.skip(reason)


def rendered_pod(config: Path, task: str, airflow_home: Path) -> dict:
    """The task's Pod as the DAG renders it, in a fresh interpreter (Airflow's settings are
    per process)."""
    done = subprocess.run([sys.executable, "-m", "container.pods", str(config), task,
                           str(airflow_home)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith(RENDERED))
    return json.loads(line[len(RENDERED):])


def test_the_pull_tasks_rendered_pod_runs_in_the_image_and_hands_back_its_output(
        pod_runnable, s3, tmp_path):
    keras_cnn(tmp_path / "model")
    s3.upload_directory(tmp_path / "model", "models/cnn/1")
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "pipeline.yaml").write_text(
        f"source: s3://{s3.bucket}/models/cnn/1\n"
        "workdir: /app/work/pipeline\n"
        f"s3: {{endpoint_url: '{s3.endpoint_url}'}}\n"
        "execution:\n  mode: kubernetes\n"
        f"  kubernetes: {{image: '{IMAGE}', config_path: /etc/tfopt/pipeline.yaml,\n"
        "               cpu_request: '1', cpu_limit: '1'}\n"
        "schedule: {cron: null, asset: null}\n")
    pod = rendered_pod(config_dir / "pipeline.yaml", "pull", tmp_path / "airflow")
    assert pod["spec"]["containers"][0]["command"][-1] == "tfopt"
    env = {key: os.environ[key] for key in
           ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    pod = for_podman(pod, tmp_path / "xcom", config_dir, env)
    # A volume of its own, so the test never shares the demo's (the claim's name otherwise).
    volume = f"tfopt-test-{uuid.uuid4().hex[:8]}"
    for spec in pod["spec"]["volumes"]:
        if "persistentVolumeClaim" in spec:
            spec["persistentVolumeClaim"]["claimName"] = volume
    podman("volume", "create", volume)
    mountpoint = podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout
    os.chown(mountpoint.strip(), 10001, 10001)
    try:
        result = run_pod(pod, tmp_path)
    finally:
        podman("volume", "rm", "--force", volume, check=False)

    assert result.failure() is None, result.log[-3000:]
    assert result.output["uri"] == f"s3://{s3.bucket}/models/cnn/1"
    assert result.output["digest"].startswith("sha256:")
    assert result.output["path"].startswith("/app/work/pipeline/")  # on the shared volume
    assert set(result.output[POD_MEMORY_KEY]) >= {"optimize", "benchmark", "publish"}
    # The pod's CPU limit reached the thread pools through the image's entrypoint.
    assert "1 CPUs available (cgroup quota 1 CPUs" in result.log
    assert "OMP_NUM_THREADS=1" in result.log


def test_a_pod_killed_for_memory_is_reported_as_an_oom_kill_not_a_silent_crash(
        pod_runnable, tmp_path):
    """A step the kernel kills at its pod's limit: exit 137, and the runner says why."""
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    name = f"tfopt-oom-{uuid.uuid4().hex[:6]}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"restartPolicy": "Never", "volumes": [
               {"name": "xcom", "emptyDir": {}}],
               "containers": [{
                   "name": "base", "image": IMAGE,
                   # past the limit at once, as a model's load would be
                   "command": ["python", "-c", "b = bytearray(1 << 30); print(len(b))"],
                   "resources": {"limits": {"memory": "256Mi", "cpu": "1"}},
                   "volumeMounts": [{"name": "xcom", "mountPath": "/airflow/xcom"}]}]}}
    result = run_pod(for_podman(pod, tmp_path / "xcom", config_dir), tmp_path)

    assert result.exit_code == 137, result.log[-2000:]
    assert "killed by the kernel" in result.failure()
    assert "memory limit" in result.failure()


def test_a_container_whose_memory_limit_is_below_the_models_need_refuses_it_before_any_work(
        pod_runnable, tmp_path):
    """The budget is the cgroup's limit: `tfopt optimize` in a 512 MiB container says why it
    cannot fit, exit 7, and writes nothing (not an OOM kill halfway)."""
    keras_cnn(tmp_path / "models" / "cnn")
    out = tmp_path / "out"
    out.mkdir()
    os.chown(out, 10001, 10001)
    done = podman("run", "--rm", "--network", "none", "--cpus", "1", "--memory", "512m",
                  "-v", f"{tmp_path / 'models'}:/models:ro", "-v", f"{out}:/out", IMAGE,
                  "optimize", "/models/cnn", "/out/cnn", "--targets", "savedmodel",
                  check=False, timeout=600)

    assert done.returncode == 7, done.stderr[-2000:]
    refusal = done.stderr.strip().splitlines()[-1]
    assert refusal.startswith("tfopt: error: "), refusal
    assert "memory.limit_in_bytes" in refusal or "memory.max" in refusal, refusal  # v1 or v2
    assert list(out.iterdir()) == []
