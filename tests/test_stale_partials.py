"""Staging directories a killed pull left behind are cleaned; one a live pull writes never is.

Writers are real processes: one killed with SIGKILL midway (its flock released by the kernel),
one alive and holding its staging directory while another pull runs beside it.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.steps.pull import SOURCES_DIR, pull
from tfopt.optimizer.files.atomic import LOCK_FILE, PARTIAL_MARK, clean_stale_partials

WRITER = """
import os, signal, sys, time
from tfopt.optimizer.files.atomic import atomic_directory
with atomic_directory(sys.argv[1]) as staging:
    staging.mkdir()
    (staging / "half.bin").write_bytes(b"x" * 1000)
    print("ready", flush=True)
    if sys.argv[2] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
"""
CLEANER = ("import sys; from tfopt.optimizer.files.atomic import clean_stale_partials as c; "
           "print(len(c(sys.argv[1])))")


def _writer(target: Path, how: str) -> subprocess.Popen:
    root = Path(__file__).resolve().parents[1]
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(target), how],
                               stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(root)})
    if how == "live":
        assert process.stdout.readline().strip() == "ready"
    else:
        process.wait(timeout=60)
        assert process.returncode == -9
    return process


def _partials(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if PARTIAL_MARK in p.name)


def _age(path: Path, seconds: float) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


@pytest.fixture
def config(tmp_path, model_dir):
    return config_from_mapping({"source": str(model_dir("keras_cnn")),
                                "workdir": str(tmp_path / "work")})


def test_a_pull_cleans_what_a_killed_pull_left_and_spares_a_live_one(config, tmp_path):
    sources = tmp_path / "work" / SOURCES_DIR
    _writer(sources / "dir-killed", "die")
    live = _writer(sources / "dir-live", "live")
    try:
        killed_partial, live_partial = (
            next(p for p in _partials(sources) if p.name.startswith(f".{name}"))
            for name in ("dir-killed", "dir-live"))
        for partial in (killed_partial, live_partial):
            _age(partial, 7200)  # old: only its lock tells the live one apart

        pulled = pull(config)

        assert not killed_partial.exists()
        assert live_partial.exists() and (live_partial / "dir-live" / "half.bin").is_file()
        assert Path(pulled.path).is_dir()
    finally:
        live.kill()
        live.wait()
    pull(config)  # its writer is gone now
    assert _partials(sources) == []


def test_an_unlocked_partial_is_removed_only_past_its_grace(tmp_path):
    recent = tmp_path / f".model{PARTIAL_MARK}recent"
    old = tmp_path / f".model{PARTIAL_MARK}old"
    for partial in (recent, old):
        (partial / "model").mkdir(parents=True)
        (partial / LOCK_FILE).touch()
    _age(recent, 5)
    _age(old, 120)

    assert clean_stale_partials(tmp_path) == [old]
    assert recent.exists()


def test_a_partial_without_a_lock_file_is_removed_only_when_long_stale(tmp_path):
    hour_old = tmp_path / f".model{PARTIAL_MARK}legacy1"
    day_old = tmp_path / f".model{PARTIAL_MARK}legacy2"
    unrelated = tmp_path / ".model-not-a-staging-dir"
    for directory in (hour_old, day_old, unrelated):
        directory.mkdir()
    _age(hour_old, 1800)
    _age(day_old, 86400)
    _age(unrelated, 86400)

    assert clean_stale_partials(tmp_path) == [day_old]
    assert hour_old.exists() and unrelated.exists()


def test_concurrent_cleaners_remove_each_stale_partial_once_and_spare_live_ones(tmp_path):
    stale = []
    for i in range(20):
        partial = tmp_path / f".m{i}{PARTIAL_MARK}x"
        (partial / "deep" / "er").mkdir(parents=True)
        (partial / LOCK_FILE).touch()
        _age(partial, 600)
        stale.append(partial)
    live = _writer(tmp_path / "held", "live")
    try:
        held = next(p for p in _partials(tmp_path) if p.name.startswith(".held"))
        _age(held, 600)
        cleaners = [subprocess.Popen(
            [sys.executable, "-c", CLEANER, str(tmp_path)],
            stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
            for _ in range(4)]
        counts = [int(c.communicate(timeout=120)[0]) for c in cleaners]
        assert sum(counts) == len(stale)  # each removed by exactly one cleaner
        assert _partials(tmp_path) == [held]
    finally:
        live.kill()
        live.wait()
