"""``make pod-demo``: the DAG's Kubernetes mode run for real, each step a pod of the image.

1. trains the demo's digits CNN once (components/demo/digits.py) and puts it, with its held-out
   split, in an S3 bucket: moto's server on the host, as a training job would leave it;
2. starts an ``mlflow server`` on the host (its store under work/pod-demo/mlflow, kept between
   runs, as a registry is);
3. parses the ``model_optimization`` DAG on a config with ``execution.mode: kubernetes`` and,
   for each task in the DAG's order, renders the Pod its KubernetesPodOperator would create
   (with the earlier pods' outputs as XComs) and runs it with ``podman kube play``
   (container/pods.py says what stands in for the cluster); all pods share the work volume, as
   they share the cluster's PVC;
4. prints the verdict and the registry's champion.

Run it twice: the second run is a new DAG run, judged against the champion the first promoted,
as on a schedule, so it rejects (the same model is not faster than itself), and the registry
keeps one version. ``--fresh`` forgets the registry and the work volume.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path

from container.pods import (
    ensure_work_volume,
    for_podman,
    image_present,
    load_dag,
    podman,
    render_pod,
    run_pod,
    step_order,
)

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "work" / "pod-demo"
BUCKET = "tfopt-demo"
# What a cluster's Secret would give the pods; moto takes any credentials.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "pod-demo", "AWS_SECRET_ACCESS_KEY": "pod-demo",
           "AWS_DEFAULT_REGION": "us-east-1"}
WORK_VOLUME = "tfopt-work"
CONFIG_TEMPLATE = """\
# Written by `make pod-demo` (container/pod_demo.py): the DAG's config in Kubernetes mode.
source: s3://{bucket}/models/digits-cnn/1
workdir: /app/work/pipeline
evaluation:
  data: s3://{bucket}/eval/digits_eval.npz
benchmark:
  batch_sizes: [1]
  min_seconds: 3
candidates:
  targets: [savedmodel, litert]
s3:
  endpoint_url: {s3}
mlflow:
  tracking_uri: {mlflow}
  experiment: tfopt-pod-demo
  registered_model: digits-cnn-pods
  alias: champion
execution:
  mode: kubernetes
  kubernetes:
    image: {image}
    config_path: /etc/tfopt/pipeline.yaml
schedule: {{cron: null, asset: null}}
"""


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve(command: list[str], ready_url: str, log_path: Path, timeout: float = 120):
    """Run a server until the block ends; wait until ``ready_url`` answers."""
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(ready_url, timeout=5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{command[0]} did not start; see {log_path}") from None
                time.sleep(0.5)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def upload_inputs(s3_url: str) -> None:
    """The trained model and its held-out split in the bucket, as training would leave them."""
    import boto3

    from tfopt.components.demo.digits import train_digits_model

    model_dir = WORK / "model"
    if not (model_dir / "digits_savedmodel").exists():
        print("training the digits CNN (once) ...", flush=True)
        train_digits_model(model_dir)
    s3 = boto3.client("s3", endpoint_url=s3_url, region_name=AWS_ENV["AWS_DEFAULT_REGION"],
                      aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"])
    s3.create_bucket(Bucket=BUCKET)
    saved_model = model_dir / "digits_savedmodel"
    for path in sorted(p for p in saved_model.rglob("*") if p.is_file()):
        s3.upload_file(str(path), BUCKET,
                       f"models/digits-cnn/1/{path.relative_to(saved_model).as_posix()}")
    s3.upload_file(str(model_dir / "digits_eval.npz"), BUCKET, "eval/digits_eval.npz")


def run_dag(image: str, s3_url: str, mlflow_url: str) -> int:
    config_dir = WORK / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "pipeline.yaml").write_text(CONFIG_TEMPLATE.format(
        bucket=BUCKET, s3=s3_url, mlflow=mlflow_url, image=image))
    dag = load_dag(config_dir / "pipeline.yaml", WORK / "airflow")
    ensure_work_volume(WORK_VOLUME)
    run_id = f"pod_demo__{datetime.now(UTC):%Y-%m-%dT%H:%M:%S}"
    print(f"DAG run {run_id}: one pod per task, image {image}", flush=True)
    outputs: dict[str, dict] = {}
    for task_id in step_order(dag):
        pod = for_podman(render_pod(dag, task_id, outputs, run_id),
                         WORK / "xcom" / task_id, config_dir, AWS_ENV)
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        started = time.perf_counter()
        result = run_pod(pod, WORK / "pods")
        threads = next((line.split(": ", 1)[1] for line in result.log.splitlines()
                        if line.startswith("tfopt-entrypoint:")), "")
        print(f"  {task_id:<9} exit {result.exit_code}  {time.perf_counter() - started:5.0f} s"
              f"  limits cpu={limits['cpu']} memory={limits['memory']}  {threads}", flush=True)
        if failure := result.failure():
            print(f"pod-demo: {failure}\n  log: {WORK / 'pods' / (result.name + '.log')}",
                  file=sys.stderr)
            (WORK / "pods" / f"{result.name}.log").write_text(result.log)
            return 1
        outputs[task_id] = result.output
    show_outcome(outputs, mlflow_url)
    return 0


def show_outcome(outputs: dict[str, dict], mlflow_url: str) -> None:
    from mlflow import MlflowClient

    gate, published, benchmark = outputs["gate"], outputs["publish"], outputs["benchmark"]
    against = "the champion" if benchmark["baseline_role"] == "champion" else "the input"
    print(f"judged vs    {against} ({benchmark['baseline_format']} on "
          f"{benchmark['baseline_runtime']})")
    # a rejection's summary lists every candidate's reason; its last clause is the verdict's
    why = gate["summary"] if gate["promote"] else gate["summary"].rsplit("; ", 1)[-1]
    print(f"verdict      {'PROMOTE ' + gate['chosen'] if gate['promote'] else 'REJECT'}: "
          f"{why}")
    client = MlflowClient(mlflow_url)
    model = published["registered_model"]
    versions = client.search_model_versions(f"name = '{model}'")
    try:
        champion = client.get_model_version_by_alias(model, "champion")
        print(f"registry     {model}: alias 'champion' -> version {champion.version} "
              f"({champion.tags.get('tfopt.candidate', '?')}, "
              f"{champion.tags.get('tfopt.format', '?')} on "
              f"{champion.tags.get('tfopt.runtime', '?')}); {len(versions)} version(s)")
    except Exception:  # noqa: BLE001 - no champion yet is an outcome, not an error
        print(f"registry     {model}: no champion; {len(versions)} version(s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pod-demo", description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="tfopt:0.1.0")
    parser.add_argument("--fresh", action="store_true",
                        help="forget the registry and the work volume of earlier runs")
    args = parser.parse_args(argv)
    if not image_present(args.image):
        print(f"pod-demo: image {args.image} not found in podman's storage: run `make image`",
              file=sys.stderr)
        return 2
    if args.fresh:
        shutil.rmtree(WORK / "mlflow", ignore_errors=True)
        podman("volume", "rm", "--force", WORK_VOLUME, check=False)
    (WORK / "mlflow").mkdir(parents=True, exist_ok=True)
    (WORK / "pods").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    bin_dir = Path(sys.executable).parent
    s3_url = f"http://127.0.0.1:{free_port()}"
    mlflow_url = f"http://127.0.0.1:{free_port()}"
    with ExitStack() as stack:
        stack.enter_context(serve([str(bin_dir / "moto_server"), "-H", "127.0.0.1",
                                   "-p", s3_url.rsplit(":", 1)[1]],
                                  f"{s3_url}/moto-api/", WORK / "moto_server.log"))
        stack.enter_context(serve(
            [str(bin_dir / "mlflow"), "server", "--host", "127.0.0.1",
             "--port", mlflow_url.rsplit(":", 1)[1], "--workers", "1",
             "--backend-store-uri", f"sqlite:///{WORK / 'mlflow' / 'mlflow.db'}",
             "--artifacts-destination", str(WORK / "mlflow" / "artifacts")],
            f"{mlflow_url}/health", WORK / "mlflow_server.log"))
        upload_inputs(s3_url)
        return run_dag(args.image, s3_url, mlflow_url)


if __name__ == "__main__":
    sys.exit(main())
