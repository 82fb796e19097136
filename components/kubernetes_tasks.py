"""Containerized mode: each step a KubernetesPodOperator running ``tfopt step`` in the image.

This is how the pipeline scales past one machine. Pods share the work directory through a
ReadWriteMany volume mounted at the config's ``workdir``, so the paths in the steps' outputs
stay valid from pod to pod; only those small JSON outputs travel, through XCom. The benchmark
pod gets the node selector for CPU benchmark nodes, so baseline and candidates are timed on one
dedicated node.

Memory: the pull pod takes ``execution.kubernetes.memory_request``/``memory_limit`` (the
model's size is not known before it is pulled). Every later pod's memory (request = limit) is
what the pull's output says for it (``pod_memory``: :func:`tfopt.components.pipeline.step_runner.pod_memory`,
from the model's size on disk and the table's measured costs, or ``resources.pod_memory_gb``):
the operator templates ``container_resources``, so each run's pods fit its own model.
"""

from __future__ import annotations

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.config.trigger_conf import ASSET_EXTRA_KEYS
from tfopt.components.pipeline.step_runner import POD_MEMORY_KEY
from tfopt.components.pipeline.step_table import BY_NAME, STEPS

XCOM_RETURN = "/airflow/xcom/return.json"
# A pod's command replaces the image's ENTRYPOINT, so it names the entrypoint again: the wrapper
# that sizes TensorFlow's and OpenMP's threads from the pod's CPU limit, then execs tfopt. With
# `tfopt` alone, a pod limited to 2 CPUs on a 64-core node would start 64-thread pools.
ENTRYPOINT = ["python", "-m", "tfopt.components.orchestration.container_entrypoint", "tfopt"]
WORK_VOLUME = "tfopt-work"
CONFIG_VOLUME = "tfopt-config"

# The known keys of the extra of the latest asset event that triggered the run, as JSON: what
# tfopt.components.orchestration.airflow_tasks.asset_event_extra takes in process, rendered into the pod's
# arguments (a pod cannot ask Airflow for the event). The pod checks it like any trigger.
_KNOWN = " or ".join(f'event.extra.get("{key}")' for key in ASSET_EXTRA_KEYS)
EVENT_TEMPLATE = (
    "{%- set latest = namespace(extra={}) -%}"
    "{%- for events in triggering_asset_events.values() -%}{%- for event in events -%}"
    f"{{%- if event.extra is mapping and ({_KNOWN}) -%}}"
    "{%- set latest.extra = event.extra -%}"
    "{%- endif -%}{%- endfor -%}{%- endfor -%}"
    "{{ {" + ", ".join(f'"{key}": latest.extra.get("{key}")' for key in ASSET_EXTRA_KEYS)
    + "} | tojson }}")


def step_arguments(name: str, config_file: str) -> list[str]:
    """``tfopt step`` arguments; upstream outputs and the trigger (the asset event's extra and
    ``dag_run.conf``, checked by the pod against the config's ``triggers``) come by
    templating."""
    needs = BY_NAME[name].needs
    pairs = ", ".join(f'"{n}": {{{{ ti.xcom_pull(task_ids="{n}") | tojson }}}}' for n in needs)
    return ["step", name, "--config", config_file,
            "--inputs", "{" + pairs + "}",
            "--event", EVENT_TEMPLATE,
            "--conf", "{{ dag_run.conf | tojson }}",
            "--output", XCOM_RETURN, "--run-id", "{{ run_id }}"]


def step_operators(config: PipelineConfig, config_file_on_host: str):
    """Declare a pod task per step of the table, wired as in the in-process DAG; returns them
    by name."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from kubernetes.client import models as k8s

    kube = config.execution.kubernetes
    volumes = [
        k8s.V1Volume(name=WORK_VOLUME, persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
            claim_name=WORK_VOLUME)),
        k8s.V1Volume(name=CONFIG_VOLUME, config_map=k8s.V1ConfigMapVolumeSource(
            name=CONFIG_VOLUME)),
    ]
    mounts = [
        k8s.V1VolumeMount(name=WORK_VOLUME, mount_path=config.workdir),
        k8s.V1VolumeMount(name=CONFIG_VOLUME, mount_path=kube.config_path.rsplit("/", 1)[0],
                          read_only=True),
    ]
    operators = {}
    for step in STEPS:
        name = step.name
        is_benchmark = name == "benchmark"
        memory = (kube.memory_request, kube.memory_limit) if not step.memory \
            else (pod_memory_template(name),) * 2
        # One object per operator: rendering the template fills it in place.
        resources = k8s.V1ResourceRequirements(
            requests={"cpu": kube.cpu_request, "memory": memory[0]},
            limits={"cpu": kube.cpu_limit, "memory": memory[1]})
        operators[name] = KubernetesPodOperator(
            task_id=name,
            name=f"tfopt-{name}",
            namespace=kube.namespace,
            image=kube.image,
            cmds=list(ENTRYPOINT),
            arguments=step_arguments(name, kube.config_path),
            container_resources=resources,
            node_selector=dict(kube.node_selector) if is_benchmark else None,
            volumes=volumes,
            volume_mounts=mounts,
            env_vars={"TF_ENABLE_ONEDNN_OPTS": "1"},
            do_xcom_push=True,
            get_logs=True,
            on_finish_action="delete_pod",
            labels={"app": "tfopt", "step": name},
        )
    for step in STEPS:
        for upstream in step.needs:
            operators[upstream] >> operators[step.name]
    return operators


def pod_memory_template(name: str) -> str:
    """The memory the pull's output gives step ``name``'s pod, rendered when it starts."""
    return f'{{{{ ti.xcom_pull(task_ids="pull")["{POD_MEMORY_KEY}"]["{name}"] }}}}'
