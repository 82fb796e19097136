"""The pipeline as a Kubeflow Pipelines (v2) definition, compiled to YAML by ``make kfp``.

The steps of ``components/pipeline/step_table.py``, as in the Airflow DAG, each a container task on the
project image running ``tfopt step NAME --config ... --inputs ... --output ...`` through the
image's thread-sizing entrypoint. Each step writes its small JSON output to a KFP output
parameter; the steps after it get that text as a string input (named after the step) and splice
it into their ``--inputs`` JSON, keyed by step name, in the order the table lists the step's
``needs``.

On the cluster every task mounts

- the ConfigMap ``config_map`` (key ``pipeline.yaml``) at ``/etc/tfopt``: the pipeline config;
- the ReadWriteMany PVC ``work_pvc`` at ``/app/work``: the shared work directory, so the paths
  in one step's output are valid in the next pod (``workdir`` is set to it);
- the Secret ``credentials_secret``'s keys as environment variables (each optional): S3 and
  MLflow credentials never travel in the config or the pipeline's parameters.

The benchmark task gets a CPU request and limit (the container's CPU quota, from which the
entrypoint sizes the thread pools) and a node selector for dedicated CPU benchmark nodes.

Memory: the pull task gets ``--memory-request``/``--memory-limit`` (the model is not pulled
yet). The pull writes, besides its output, the memory each later step's pod needs for the model
it pulled (``tfopt step pull --pod-memory STEP=FILE``: the table's measured costs, or the
config's ``resources.pod_memory_gb``) to output parameters ``memory_STEP``, and each later task
takes its memory request and limit from that channel: each run's pods fit its own model.

KFP caching is off: a rerun with the same parameters must look at the source again (the model
behind an S3 prefix or a registry alias changes); the work directory, keyed by the source's
digest, already makes finished steps cheap to repeat.

This module imports only kfp, the standard library and the step table (itself standard library
only), and runs in its own environment (``.venv-kfp``): Kubeflow's SDK pins a ``kubernetes``
client the Airflow provider can't share. Nothing in the main environment imports it.

    python -P components/orchestration/kubeflow_pipeline.py --image registry.example.com/tfopt:0.1.0 \\
        --output work/kfp/model_optimization_pipeline.yaml
"""

# No `from __future__ import annotations`: KFP reads the component functions' annotations as
# types, and strings would read as artifact type names.
import argparse
import inspect
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kfp import compiler, dsl, kubernetes

# Run as a script in .venv-kfp, where the project is not installed: the table is read from here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tfopt.components.pipeline.step_table import STEPS, Step

PIPELINE_NAME = "tfopt-model-optimization"
ENTRYPOINT = ["python", "-m", "tfopt.components.orchestration.container_entrypoint", "tfopt"]

# Defaults match tfopt.components.config.pipeline_config.KubernetesConfig and ScheduleConfig (a test compares them).
DEFAULT_IMAGE = "tfopt:0.1.0"
DEFAULT_CPU = "2"
DEFAULT_MEMORY_REQUEST = "4Gi"
DEFAULT_MEMORY_LIMIT = "8Gi"
DEFAULT_NODE_SELECTOR = {"workload": "cpu-benchmark"}
RETRIES = 2
RETRY_BACKOFF = "60s"

CONFIG_MAP = "tfopt-config"
CONFIG_MOUNT = "/etc/tfopt"
CONFIG_FILE = f"{CONFIG_MOUNT}/pipeline.yaml"
WORK_PVC = "tfopt-work"
WORK_MOUNT = "/app/work"
WORKDIR = f"{WORK_MOUNT}/pipeline"
CREDENTIALS_SECRET = "tfopt-credentials"
CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                  "AWS_DEFAULT_REGION", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


@dataclass(frozen=True)
class ClusterOptions:
    """What is fixed when the pipeline is compiled (KFP can't parameterize these per run)."""

    image: str = DEFAULT_IMAGE
    cpu_request: str = DEFAULT_CPU
    cpu_limit: str = DEFAULT_CPU
    memory_request: str = DEFAULT_MEMORY_REQUEST
    memory_limit: str = DEFAULT_MEMORY_LIMIT
    node_selector: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_NODE_SELECTOR))


def inputs_json(upstream: dict) -> dsl.ConcatPlaceholder | str:
    """``{"pull": <pull's output>, ...}``: each output is already JSON, so splicing its text
    between the keys gives a JSON document."""
    if not upstream:
        return "{}"
    items: list = []
    for position, (step, output) in enumerate(upstream.items()):
        items += [("{" if position == 0 else ", ") + json.dumps(step) + ": ", output]
    return dsl.ConcatPlaceholder(items + ["}"])


def step_container(image: str, step: str, conf, result, upstream: dict,
                   run_id=None, pod_memory: dict | None = None) -> dsl.ContainerSpec:
    args = ["step", step, "--config", CONFIG_FILE, "--set", f"workdir={WORKDIR}",
            "--conf", conf, "--inputs", inputs_json(upstream), "--output", result]
    if run_id is not None:
        args += ["--run-id", run_id]
    for sized, path in (pod_memory or {}).items():
        args += ["--pod-memory", dsl.ConcatPlaceholder([f"{sized}=", path])]
    return dsl.ContainerSpec(image=image, command=list(ENTRYPOINT), args=args)


SIZED = tuple(step.name for step in STEPS if step.memory)  # whose memory the pull writes


def memory_output(step: str) -> str:
    return f"memory_{step}"


def step_component(image: str, step: Step):
    """The container component of ``step``: a string input per step it needs (named after
    it), its JSON ``result``, and for pull, an output parameter per sized step's memory."""
    outputs = [memory_output(s) for s in SIZED] if step.name == "pull" else []
    parameters = [inspect.Parameter("conf", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    annotation=dict)]
    parameters += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                     annotation=str)
                   for name in step.needs + (("run_id",) if step.run_id else ())]
    parameters += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                     annotation=dsl.OutputPath(str))
                   for name in ("result", *outputs)]

    def component(*args):
        given = dict(zip([p.name for p in parameters], args))
        return step_container(image, step.name, given["conf"], given["result"],
                              {n: given[n] for n in step.needs}, run_id=given.get("run_id"),
                              pod_memory={s: given[memory_output(s)] for s in SIZED
                                          if memory_output(s) in given})

    component.__name__ = component.__qualname__ = step.name
    component.__doc__ = step.what
    component.__signature__ = inspect.Signature(parameters)
    return dsl.container_component(component)


def build_pipeline(options: ClusterOptions):
    """The pipeline function for ``options``; the image is baked into each component."""
    components = {step.name: step_component(options.image, step) for step in STEPS}

    @dsl.pipeline(name=PIPELINE_NAME,
                  description="Freeze and optimize a trained TensorFlow SavedModel, benchmark "
                              "it against the original and the champion, gate it, and publish "
                              "it to the MLflow registry.")
    def model_optimization(conf: dict = {},  # noqa: B006 - KFP takes literal defaults only
                           config_map: str = CONFIG_MAP, work_pvc: str = WORK_PVC,
                           credentials_secret: str = CREDENTIALS_SECRET):
        """conf: the trigger's conf, as in the Airflow DAG: {"source": "s3://...",
        "overrides": {"evaluation.data": "s3://..."}}; each pod checks it against the
        config's triggers.allow_overrides (docs/triggers.md)."""
        tasks = {}
        for step in STEPS:
            upstream = {name: tasks[name].outputs["result"] for name in step.needs}
            if step.run_id:
                upstream["run_id"] = dsl.PIPELINE_JOB_ID_PLACEHOLDER
            tasks[step.name] = task = components[step.name](conf=conf, **upstream)
            if step.memory:
                memory = tasks["pull"].outputs[memory_output(step.name)]
                task.set_memory_request(memory).set_memory_limit(memory)
            else:
                task.set_memory_request(options.memory_request)
                task.set_memory_limit(options.memory_limit)
            task.set_caching_options(False)
            task.set_retry(num_retries=RETRIES, backoff_duration=RETRY_BACKOFF)
            kubernetes.use_config_map_as_volume(task, config_map_name=config_map,
                                                mount_path=CONFIG_MOUNT)
            kubernetes.mount_pvc(task, pvc_name=work_pvc, mount_path=WORK_MOUNT)
            kubernetes.use_secret_as_env(task, secret_name=credentials_secret,
                                         secret_key_to_env={k: k for k in CREDENTIAL_ENV},
                                         optional=True)
            kubernetes.set_security_context(task, run_as_non_root=True)
        benchmark = tasks["benchmark"]
        benchmark.set_cpu_request(options.cpu_request).set_cpu_limit(options.cpu_limit)
        for key, value in options.node_selector.items():
            kubernetes.add_node_selector(benchmark, label_key=key, label_value=value)

    return model_optimization


def compile_pipeline(options: ClusterOptions, output: Path) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(pipeline_func=build_pipeline(options), package_path=str(output))
    return output


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compile the tfopt pipeline for Kubeflow.")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="the project image, pushed")
    parser.add_argument("--output", type=Path,
                        default=Path("work/kfp/model_optimization_pipeline.yaml"))
    parser.add_argument("--cpu-request", default=DEFAULT_CPU, help="benchmark task")
    parser.add_argument("--cpu-limit", default=DEFAULT_CPU, help="benchmark task")
    parser.add_argument("--memory-request", default=DEFAULT_MEMORY_REQUEST,
                        help="pull task (the later ones are sized from the model it pulls)")
    parser.add_argument("--memory-limit", default=DEFAULT_MEMORY_LIMIT, help="pull task")
    parser.add_argument("--node-selector", type=_key_value, action="append", metavar="KEY=VALUE",
                        help="benchmark node label (repeatable; default "
                             + ", ".join(f"{k}={v}" for k, v in DEFAULT_NODE_SELECTOR.items())
                             + ")")
    args = parser.parse_args(argv)
    options = ClusterOptions(
        image=args.image, cpu_request=args.cpu_request, cpu_limit=args.cpu_limit,
        memory_request=args.memory_request, memory_limit=args.memory_limit,
        node_selector=dict(args.node_selector) if args.node_selector
        else dict(DEFAULT_NODE_SELECTOR))
    written = compile_pipeline(options, args.output)
    print(f"wrote {written} (image {options.image})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
