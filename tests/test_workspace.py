"""Workspace: finished steps are reused, unfinished ones rerun."""

import pytest

from tfopt.components.pipeline.artifacts import PulledModel
from tfopt.components.pipeline.workspace import Workspace, run_key


def test_a_finished_step_is_reused_not_rerun(tmp_path):
    ws = Workspace.for_run(tmp_path, "a" * 64, "b" * 64)
    calls = []

    def step(step_dir):
        calls.append(step_dir)
        return PulledModel(uri="s3://b/m", path=str(step_dir), digest="d")

    first = ws.reuse_or_run("pull", PulledModel, step)
    second = ws.reuse_or_run("pull", PulledModel, step)
    assert first == second and len(calls) == 1


def test_a_step_that_died_midway_runs_again(tmp_path):
    ws = Workspace(tmp_path / "run")
    calls = []

    def dies(step_dir):
        calls.append(1)
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        ws.reuse_or_run("freeze", PulledModel, dies)
    assert ws.finished("freeze") is None  # nothing recorded for the step that died
    result = ws.reuse_or_run("freeze", PulledModel,
                             lambda d: PulledModel(uri="u", path=str(d), digest="x"))
    assert result.digest == "x" and calls == [1]


def test_the_run_key_depends_on_source_and_config():
    assert run_key("a" * 64, "b" * 64) != run_key("a" * 64, "c" * 64)
    assert run_key("a" * 64, "b" * 64) != run_key("d" * 64, "b" * 64)


def test_a_step_against_another_baseline_is_not_a_reuse(tmp_path):
    ws = Workspace(tmp_path / "run")
    against_input = Workspace.keyed("benchmark", "sha256:input")
    against_champion = Workspace.keyed("benchmark", "sha256:champion-v1")
    assert against_input != against_champion
    assert Workspace.keyed("benchmark") == "benchmark"
    ws.reuse_or_run(against_input, PulledModel, lambda d: PulledModel("u", str(d), "a"))
    assert ws.finished(against_champion) is None


def test_a_step_two_runs_start_at_once_runs_once_and_both_get_its_output(tmp_path):
    """Two runs on one source at once (a DAG run triggered twice over one shared volume):
    without the step's lock both would write the step's output, the second replacing the
    first's under it, and the first's record would name content that is gone."""
    import secrets
    import threading
    import time

    from tfopt.optimizer.files.atomic import atomic_directory

    ws = Workspace(tmp_path / "run")
    calls, results = [], []
    start = threading.Barrier(2)

    def freeze(step_dir):
        token = secrets.token_hex(8)
        calls.append(token)
        with atomic_directory(step_dir / "model", overwrite=True) as staging:
            staging.mkdir()
            (staging / "content").write_text(token)
            time.sleep(0.5)  # long enough for the other run to arrive meanwhile
        return PulledModel(uri="u", path=str(step_dir / "model"), digest=token)

    def one_run():
        start.wait()
        results.append(ws.reuse_or_run("freeze", PulledModel, freeze))

    threads = [threading.Thread(target=one_run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert len(calls) == 1 and len(results) == 2 and results[0] == results[1]
    assert (tmp_path / "run" / "freeze" / "model" / "content").read_text() == results[0].digest
