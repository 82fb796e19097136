"""`make kfp`: the Kubeflow v2 pipeline, compiled in its own environment, runs the step table's
steps as `tfopt step` containers on the image, wired like the other orchestrators, with the
benchmark task's CPU quota and node selector, and each later pod's memory from the pull."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tfopt.components.cli import build_parser
from tfopt.components.config.pipeline_config import KubernetesConfig, ScheduleConfig
from tfopt.components.pipeline.run import STEPS
from tfopt.components.pipeline.step_runner import NEEDS

REPO = Path(__file__).resolve().parents[1]
COMPILED = REPO / "work" / "kfp" / "model_optimization_pipeline.yaml"
MODULE = REPO / "components" / "kubeflow_pipeline.py"
ENTRYPOINT = ["python", "-m", "tfopt.components.orchestration.container_entrypoint", "tfopt"]
PLACEHOLDER = re.compile(r"\{\{\$\.[^}]*\}\}")


def make_kfp(*variables: str) -> None:
    """Creates .venv-kfp on first use (the only slow part), then compiles."""
    done = subprocess.run(["make", "kfp", *variables], cwd=REPO, capture_output=True,
                          text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def load(path: Path) -> tuple[dict, dict]:
    """``(pipeline spec, Kubernetes platform spec)``: the file holds both YAML documents."""
    documents = list(yaml.safe_load_all(path.read_text()))
    assert len(documents) == 2, "expected the pipeline spec and the kubernetes platform spec"
    spec, platform = documents
    return spec, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


@pytest.fixture(scope="module")
def compiled():
    COMPILED.unlink(missing_ok=True)
    make_kfp()
    assert COMPILED.exists()
    return load(COMPILED)


def tasks(spec: dict) -> dict:
    return spec["root"]["dag"]["tasks"]


def container(spec: dict, step: str) -> dict:
    return spec["deploymentSpec"]["executors"][f"exec-{step}"]["container"]


def argument(args: list, flag: str):
    return args[args.index(flag) + 1]


def test_the_pipeline_runs_exactly_the_step_tables_steps(compiled):
    spec, _ = compiled
    assert sorted(tasks(spec)) == sorted(STEPS)
    assert spec["pipelineInfo"]["name"] == "tfopt-model-optimization"


def test_each_step_waits_for_exactly_the_outputs_it_reads(compiled):
    spec, _ = compiled
    for step in STEPS:
        task = tasks(spec)[step]
        assert sorted(task.get("dependentTasks", [])) == sorted(NEEDS[step]), step
        producers = {p["taskOutputParameter"]["producerTask"]
                     for p in task["inputs"]["parameters"].values() if "taskOutputParameter" in p}
        assert producers == set(NEEDS[step]), step


def test_inputs_json_is_keyed_by_step_name_in_the_order_the_step_runner_reads(compiled):
    spec, _ = compiled
    for step in STEPS:
        inputs = argument(container(spec, step)["args"], "--inputs")
        if not NEEDS[step]:
            assert inputs == "{}"
            continue
        pieces = json.loads(inputs)["Concat"]
        # With sample outputs in place of the placeholders, the text is the JSON the CLI reads.
        sample = "".join(json.dumps({"from": "upstream"}) if "{{$" in p else p for p in pieces)
        spliced = json.loads(sample)
        assert list(spliced) == list(NEEDS[step]), step
        assert all(value == {"from": "upstream"} for value in spliced.values())


def test_every_task_runs_tfopt_step_on_the_image_through_the_entrypoint(compiled):
    spec, _ = compiled
    kube = KubernetesConfig()
    for step in STEPS:
        spec_container = container(spec, step)
        assert spec_container["image"] == kube.image
        assert spec_container["command"] == ENTRYPOINT
        args = spec_container["args"]
        assert args[:2] == ["step", step]
        assert argument(args, "--config") == kube.config_path
        assert "output_file" in argument(args, "--output")


def test_the_tfopt_cli_accepts_every_tasks_arguments(compiled):
    spec, _ = compiled
    parser = build_parser()
    for step in STEPS:
        args = [PLACEHOLDER.sub("x", a) for a in container(spec, step)["args"]]
        parsed = parser.parse_args(args)
        assert (parsed.command, parsed.name) == ("step", step)
        assert parsed.overrides == ["workdir=/app/work/pipeline"]
    publish_args = container(spec, "publish")["args"]
    assert "pipeline_job_uuid" in json.dumps(tasks(spec)["publish"]["inputs"])
    assert "--run-id" in publish_args


def test_the_benchmark_task_gets_the_cpu_quota_and_benchmark_nodes(compiled):
    spec, executors = compiled
    kube = KubernetesConfig()
    resources = container(spec, "benchmark")["resources"]
    assert resources["resourceCpuRequest"] == kube.cpu_request
    assert resources["resourceCpuLimit"] == kube.cpu_limit
    assert executors["exec-benchmark"]["nodeSelector"]["labels"] == kube.node_selector
    for step in set(STEPS) - {"benchmark"}:
        assert "nodeSelector" not in executors[f"exec-{step}"], step
        assert "resourceCpuLimit" not in container(spec, step)["resources"], step


def test_each_later_pod_takes_the_memory_the_pull_writes_for_the_model_it_pulled(compiled):
    spec, _ = compiled
    kube = KubernetesConfig()
    pull = container(spec, "pull")
    assert pull["resources"]["resourceMemoryRequest"] == kube.memory_request
    assert pull["resources"]["resourceMemoryLimit"] == kube.memory_limit
    written = {}  # step -> the output parameter pull writes its memory to
    args = pull["args"]
    for position, arg in enumerate(args):
        if arg == "--pod-memory":
            step, file = json.loads(args[position + 1])["Concat"]
            written[step.removesuffix("=")] = re.search(r"parameters\['(\w+)'\]", file)[1]
    assert sorted(written) == sorted(set(STEPS) - {"pull"})
    for step, output in written.items():
        task = tasks(spec)[step]
        channel = f"pipelinechannel--pull-{output}"
        assert task["inputs"]["parameters"][channel]["taskOutputParameter"] == {
            "producerTask": "pull", "outputParameterKey": output}, step
        resources = container(spec, step)["resources"]
        placeholder = f"{{{{$.inputs.parameters['{channel}']}}}}"
        assert resources["resourceMemoryRequest"] == placeholder, step
        assert resources["resourceMemoryLimit"] == placeholder, step


def test_every_task_mounts_the_config_and_shared_workdir_and_takes_optional_credentials(
        compiled):
    spec, executors = compiled
    config_dir = KubernetesConfig().config_path.rsplit("/", 1)[0]
    for step in STEPS:
        executor = executors[f"exec-{step}"]
        assert [m["mountPath"] for m in executor["configMapAsVolume"]] == [config_dir]
        assert [m["mountPath"] for m in executor["pvcMount"]] == ["/app/work"]
        secrets = executor["secretAsEnv"]
        assert [s["optional"] for s in secrets] == [True]
        env = {k["envVar"] for k in secrets[0]["keyToEnv"]}
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= env
        assert executor["securityContext"]["runAsNonRoot"] is True
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert set(parameters) == {"conf", "config_map", "work_pvc", "credentials_secret"}


def test_no_caching_and_retries_as_the_schedule_says(compiled):
    spec, _ = compiled
    schedule = ScheduleConfig()
    for step in STEPS:
        task = tasks(spec)[step]
        assert not task["cachingOptions"].get("enableCache", False), step
        assert task["retryPolicy"]["maxRetryCount"] == schedule.retries
        assert task["retryPolicy"]["backoffDuration"] == f"{schedule.retry_delay_seconds}s"


def test_the_image_is_chosen_when_compiling(compiled, tmp_path):
    output = tmp_path / "pipeline.yaml"
    make_kfp("KFP_IMAGE=registry.example.com/ml/tfopt:1.2.3", f"KFP_OUTPUT={output}")
    spec, _ = load(output)
    assert {container(spec, s)["image"] for s in STEPS} == {"registry.example.com/ml/tfopt:1.2.3"}


def _imports(path: Path) -> set[str]:
    """The modules outside the standard library that loading ``path`` imports."""
    imported = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    return {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names}


def test_the_pipeline_module_imports_only_kfp_the_standard_library_and_the_step_table():
    assert {name.split(".")[0] for name in _imports(MODULE)} == {"kfp", "components"}
    assert {name for name in _imports(MODULE) if name.startswith("components")} == {
        "tfopt.components.pipeline.step_table"}
    # ... which the Kubeflow environment can import: the standard library and the records,
    # the candidate record among them.
    table = REPO / "components" / "step_table.py"
    assert _imports(table) == {"components", "tfopt.components.pipeline.artifacts"}
    assert _imports(REPO / "components" / "artifacts.py") == {"tfopt.optimizer.candidates.candidate"}
    assert _imports(REPO / "optimizer" / "candidates" / "candidate.py") == set()
    for package in ("optimizer", "optimizer/candidates"):
        assert _imports(REPO / package / "__init__.py") == set()


def test_nothing_in_the_main_environment_imports_the_pipeline_module():
    importers = [
        path.relative_to(REPO) for folder in ("optimizer", "components", "dags")
        for path in (REPO / folder).rglob("*.py")
        if path != MODULE and "kubeflow_pipeline" in path.read_text()
    ]
    assert importers == []
