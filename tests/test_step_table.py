"""The step table (components/pipeline/step_table.py) is the one place the pipeline is declared: every
runner reads it, each step reads only outputs of steps before it, and the pods it sizes grow
with the model. (The Airflow DAG's parsed task graph and the compiled Kubeflow spec are held to
the same table by tests/test_dag.py and tests/test_kfp_pipeline.py.)"""

import json
from pathlib import Path

import pytest

from tfopt.components.cli import build_parser, main
from tfopt.components.config.pipeline_config import ConfigError, config_from_mapping
from tfopt.components.orchestration.kubernetes_tasks import step_arguments
from tfopt.components.pipeline.artifacts import Record
from tfopt.components.pipeline.run import STEPS
from tfopt.components.pipeline.step_runner import (
    NEEDS,
    POD_MEMORY_KEY,
    StepInputError,
    pod_memory,
    run_step,
)
from tfopt.components.pipeline.step_table import (
    BENCHMARK_AND_EVALUATE,
    BY_NAME,
    CANDIDATES,
    GIB,
    HEADROOM,
    MIB,
    NAMES,
    OPTIMIZE,
    load_function,
)

CONFIG = {"source": "unused", "schedule": {"cron": None}}


def test_each_step_reads_only_steps_before_it_so_the_tables_order_runs_it():
    seen: set[str] = set()
    for name in NAMES:
        assert set(BY_NAME[name].needs) <= seen, name
        seen.add(name)


def test_every_runner_uses_the_tables_steps_in_its_order():
    assert STEPS == NAMES
    assert NEEDS == {name: BY_NAME[name].needs for name in NAMES}
    step_parser = build_parser()._subparsers._group_actions[0].choices["step"]
    [name_argument] = [a for a in step_parser._actions if a.dest == "name"]
    assert tuple(name_argument.choices) == NAMES
    for name in NAMES:  # a pod's --inputs name exactly the steps it reads, in the table's order
        inputs = step_arguments(name, "/etc/tfopt/pipeline.yaml")[5]
        assert inputs.count("xcom_pull") == len(BY_NAME[name].needs)
        positions = [inputs.index(f'"{need}":') for need in BY_NAME[name].needs]
        assert positions == sorted(positions), name


def test_every_step_and_named_part_is_a_function_and_returns_a_record():
    for step in BY_NAME.values():
        assert callable(step.load()), step.name
        assert issubclass(step.output, Record), step.name
        for part in step.parts:
            assert callable(load_function(part.function)), part.name
    parts = {part.name: step.name for step in BY_NAME.values() for part in step.parts}
    assert parts == {"candidates": "optimize", "baseline": "benchmark", "report": "gate",
                     "tune": "gate"}


def test_publish_reads_the_gates_record_not_the_steps_before_it():
    assert BY_NAME["publish"].needs == ("pull", "gate")


def test_a_step_without_the_outputs_it_reads_is_refused_in_one_line(tmp_path):
    config = config_from_mapping({**CONFIG, "workdir": str(tmp_path)})
    with pytest.raises(StepInputError, match="step 'publish' needs the outputs of: gate"):
        run_step("publish", config, {"pull": {"uri": "x", "path": "x", "digest": "d"}})
    with pytest.raises(StepInputError, match="unknown step 'tune'"):
        run_step("tune", config, {})


def test_pod_memory_follows_the_measured_line_with_headroom():
    config = config_from_mapping(CONFIG)
    small, large = pod_memory(config, 48 * MIB), pod_memory(config, 191 * MIB)
    assert sorted(small) == sorted(set(NAMES) - {"pull"})
    mib = {label: {s: int(v.removesuffix("Mi")) for s, v in sized.items()}
           for label, sized in (("small", small), ("large", large))}
    # benchmark: the line through its measured peaks, times the headroom, rounded up to 256 MiB
    for label, size in (("small", 48 * MIB), ("large", 191 * MIB)):
        peak = BENCHMARK_AND_EVALUATE.peak(size) * HEADROOM / MIB
        assert peak <= mib[label]["benchmark"] < peak + 256, label
    # optimize holds its candidates too: the larger of the two peaks sizes it
    assert mib["large"]["optimize"] >= max(CANDIDATES.peak(191 * MIB),
                                           OPTIMIZE.peak(191 * MIB)) * HEADROOM / MIB
    assert all(mib["large"][s] > mib["small"][s] for s in small)
    assert all(value % 256 == 0 for sized in mib.values() for value in sized.values())
    assert BENCHMARK_AND_EVALUATE.peak(0) > 0.5 * GIB  # never below TensorFlow's own runtime


def test_resources_pod_memory_gb_overrides_one_steps_estimate():
    config = config_from_mapping({**CONFIG, "resources": {"pod_memory_gb": {"benchmark": 12}}})
    sized = pod_memory(config, 48 * MIB)
    assert sized["benchmark"] == "12288Mi"
    assert sized["evaluate"] == pod_memory(config_from_mapping(CONFIG), 48 * MIB)["evaluate"]


def test_a_pod_memory_override_for_a_step_not_sized_is_refused():
    with pytest.raises(ConfigError, match="no step 'pull' is sized from the model"):
        config_from_mapping({**CONFIG, "resources": {"pod_memory_gb": {"pull": 2}}})


def _dense_savedmodel(path: Path, width: int) -> int:
    """A one-layer model of ``width`` x ``width`` float32 weights; returns its bytes on disk."""
    from benchmark_testing import dense_stack

    from tfopt.optimizer.model.footprint import disk_bytes

    dense_stack(path, layers=1, width=width)
    return disk_bytes(path)


def test_the_pull_writes_each_later_pods_memory_for_the_model_it_pulled(tmp_path, capsys):
    written = {}
    for width in (16, 2048):
        model = tmp_path / f"dense{width}"
        size = _dense_savedmodel(model, width)
        config = tmp_path / f"pipeline{width}.yaml"
        config.write_text(f"source: {model}\nworkdir: {tmp_path / 'work'}\n")
        files = {step: tmp_path / f"{width}-{step}" for step in ("benchmark", "optimize")}
        assert main(["step", "pull", "--config", str(config),
                     *(arg for step, file in files.items()
                       for arg in ("--pod-memory", f"{step}={file}"))]) == 0
        output = json.loads(capsys.readouterr().out)
        assert output["size_bytes"] == size
        written[width] = {step: file.read_text() for step, file in files.items()}
        assert written[width] == {step: output[POD_MEMORY_KEY][step] for step in files}
        assert written[width] == {step: BY_NAME[step].pod_memory(size) for step in files}
    small, large = (int(written[w]["benchmark"].removesuffix("Mi")) for w in (16, 2048))
    assert large > small  # 16 MiB more weights: ~0.5 GiB more for the benchmark's pod
