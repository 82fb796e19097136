"""Every model call runs under a deadline: a call that never returns stops its process with one
line and exit 9, in a worker as in the CLI's own process, and nothing is published; the next
run on a good model proceeds."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_testing import assert_clean_failure, run_tfopt

from tfopt.optimizer.errors import ModelCallTimeoutError
from tfopt.optimizer.runtime.call_deadline import ENV, CallDeadline, FirstCallClock
from tfopt.optimizer.system.worker_process import run_job

TESTS = Path(__file__).parent


def test_a_calls_deadline_is_the_floor_or_a_multiple_of_the_models_first_call():
    deadline = CallDeadline(min_seconds=300, first_call_multiple=60)
    assert deadline.seconds(None) == 300  # a first call: the floor
    assert deadline.seconds(0.01) == 300  # a quick model keeps the floor
    assert deadline.seconds(20.0) == 1200  # a slow one gets 60x its first call


def test_the_first_call_is_timed_and_later_calls_get_its_multiple(monkeypatch):
    monkeypatch.setattr("tfopt.optimizer.runtime.call_deadline._configured",
                        CallDeadline(min_seconds=1, first_call_multiple=100))
    clock = FirstCallClock("a model")
    assert clock.seconds() == 1
    with clock.call():
        time.sleep(0.05)
    assert clock.first_call >= 0.05 and clock.seconds() >= 5


def test_a_block_past_its_deadline_ends_the_process_with_one_line_and_exit_9():
    code = ("from tfopt.optimizer.runtime.call_deadline import deadline\n"
            "import time\n"
            "with deadline(0.5, 'a call of m did not return'):\n"
            "    time.sleep(60)\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                            text=True, timeout=60)
    assert time.monotonic() - started < 10
    assert result.returncode == ModelCallTimeoutError.exit_code == 9
    assert result.stderr.strip() == "a call of m did not return"


def test_a_workers_call_past_its_deadline_is_the_typed_error_in_its_parent(monkeypatch, capfd):
    # the deadline reaches the worker through its environment, as a run's configure() sends it
    monkeypatch.setenv(ENV, CallDeadline(min_seconds=0.5).model_dump_json())
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    started = time.monotonic()
    with pytest.raises(ModelCallTimeoutError, match=r"^a call of a stuck model did not return "
                                                    r"within its deadline of 0\.5s"):
        run_job("stuck_call_worker", {"sleep": 60})
    assert time.monotonic() - started < 30
    # the worker's line is the error's, not passed on to this process's stderr as well
    assert "stuck model" not in capfd.readouterr().err


def test_tfopt_freeze_stops_a_call_past_model_call_seconds_and_writes_nothing(tmp_path,
                                                                             model_dir):
    dst = tmp_path / "frozen"
    result = run_tfopt("freeze", model_dir("never_returning_loop"), dst,
                       "--model-call-seconds", "2", timeout=300)
    assert_clean_failure(result, 9, "did not return within its deadline of 2s")
    assert not dst.exists()
    assert_clean_failure(run_tfopt("freeze", model_dir("never_returning_loop"), dst,
                                   "--model-call-seconds", "0"), 2, "--model-call-seconds")


def _config(tmp_path, source, sections: str = "") -> Path:
    config = tmp_path / f"{Path(source).name}.yaml"
    config.write_text(
        f"source: {source}\nworkdir: {tmp_path / 'work'}\n"
        "benchmark: {batch_sizes: [1], min_runs: 10, min_seconds: 0.2, warmup: 2}\n"
        "candidates: {savedmodel_variants: []}\ntuning: {enabled: false}\n"
        f"mlflow: {{tracking_uri: 'sqlite:///{tmp_path / 'mlflow.db'}', experiment: deadline, "
        "registered_model: deadline}\n" + sections)
    return config


@pytest.mark.slow
def test_a_model_that_never_returns_ends_the_run_at_its_deadline_and_the_next_run_proceeds(
        tmp_path, model_dir):
    hanging = _config(tmp_path, model_dir("never_returning_loop"),
                      "resources: {model_call_seconds: 3}\n")
    started = time.monotonic()
    result = run_tfopt("run", "--config", hanging, timeout=300)
    elapsed = time.monotonic() - started
    assert_clean_failure(result, 9, "did not return within its deadline of 3s",
                         "resources.model_call_seconds")
    # freeze's equivalence check makes the first call: the run ends there, nothing after it
    assert result.stdout == "" and elapsed < 240, elapsed
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert client.search_registered_models() == []
    # the same workdir and MLflow: a good model's run is not held by the stopped one
    good = _config(tmp_path, model_dir("tf_module_two_signatures"))
    result = run_tfopt("run", "--config", good, timeout=600)
    assert result.returncode in (0, 3), result.stderr  # promoted or rejected: judged
    assert "verdict" in result.stdout and "mlflow       run" in result.stdout, result.stdout
    experiment = client.get_experiment_by_name("deadline")
    assert len(client.search_runs([experiment.experiment_id])) == 1  # the good run's only
