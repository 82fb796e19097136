"""Whole pipeline runs at once (``tfopt run`` processes) over one shared work directory and
one MLflow tracking server, and the checks that nothing raced: for benchmarks/concurrent_runs.py
and tests/test_concurrent_runs.py.

A run is a process, as a scheduled Airflow task or a Kubernetes pod is, with its own source
(a small Keras convnet, one seed per digest) or the same source as others under one DAG run id
(a task started several times). After they have all exited:

- every step record (``result.json``) and every benchmark result names only files that exist
  and hash to the digest recorded for them: a step that read another's half-written output, or
  an output replaced under a reader, shows up as a missing path or another digest;
- no ``.partial`` staging entry is left anywhere in the work directory;
- per source, each step ran once and every other run reused its finished result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

TFOPT = Path(sys.executable).parent / "tfopt"
REUSED = "reusing the finished result in "


def write_sources(root: Path, seeds: list[int]) -> list[Path]:
    """One small convnet per seed (distinct weights, so distinct digests), each exported once
    in a child process (TensorFlow stays out of the caller)."""
    paths = [root / f"source-{seed}" for seed in seeds]
    missing = [(p, s) for p, s in zip(paths, seeds) if not (p / "saved_model.pb").is_file()]
    if missing:
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import model_zoo\n"
                "for path, seed in zip(sys.argv[2::2], sys.argv[3::2]):\n"
                "    model_zoo.keras_cnn(path, seed=int(seed))\n")
        subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent),
                        *[str(v) for p, s in missing for v in (p, s)]],
                       check=True, capture_output=True)
    return paths


def write_config(path: Path, source: Path, workdir: Path, tracking_uri: str,
                 registered_model: str, benchmark: str) -> Path:
    """A pipeline config for the savedmodel candidates only (frozen, optimized), quick; every
    run registers a version, promoted or not."""
    path.write_text(
        f"source: {source}\nworkdir: {workdir}\n"
        f"benchmark: {benchmark}\n"
        "tuning: {enabled: false}\n"
        "candidates: {targets: [savedmodel], savedmodel_variants: []}\n"
        "gate: {max_accuracy_drop_abs: 1.0}\n"
        # a reject registers the fastest candidate as challenger: every run makes a version
        "publish: {register_rejected: true}\n"
        f"mlflow: {{tracking_uri: '{tracking_uri}', experiment: concurrent, "
        f"registered_model: {registered_model}}}\n")
    return path


@dataclass
class Run:
    name: str
    source: Path
    run_id: str
    registered_model: str
    process: subprocess.Popen | None = None
    returncode: int | None = None
    outcome: dict | None = None
    stderr: str = ""

    @property
    def steps_reused(self) -> list[str]:
        return [line.split(REUSED, 1)[1].rstrip().rsplit("/", 1)[-1]
                for line in self.stderr.splitlines() if REUSED in line]


def run_all(runs: list[Run], configs: dict[str, Path], logs: Path,
            timeout: float = 3600) -> float:
    """Start every run at once, wait for all; their wall time in seconds."""
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.monotonic()
    for run in runs:
        with open(logs / f"{run.name}.out", "wb") as out, \
                open(logs / f"{run.name}.err", "wb") as err:  # the child keeps its own copies
            run.process = subprocess.Popen(
                [str(TFOPT), "-v", "run", "--config", str(configs[run.name]), "--run-id",
                 run.run_id, "--json"], stdout=out, stderr=err, env=env)
    deadline = started + timeout
    for run in runs:
        try:
            run.returncode = run.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            run.process.kill()
            run.returncode = run.process.wait()
        run.stderr = (logs / f"{run.name}.err").read_text(errors="replace")
        out = (logs / f"{run.name}.out").read_text(errors="replace")
        try:
            run.outcome = json.loads(out) if out.strip() else None
        except json.JSONDecodeError:
            run.outcome = None
    return time.monotonic() - started


def _referenced(value, found: list[tuple[str, str | None]]) -> None:
    """Every (path, digest) a record names: a mapping with ``path`` (and ``digest`` when it has
    one), and every other ``*_path`` / ``*_paths`` / ``*_dir`` value."""
    if isinstance(value, dict):
        if isinstance(value.get("path"), str):
            digest = value.get("digest")
            found.append((value["path"], digest if isinstance(digest, str) else None))
        for key, item in value.items():
            if key.endswith(("_path", "_dir")) and isinstance(item, str):
                found.append((item, None))
            elif key.endswith("_paths") and isinstance(item, dict):
                found.extend((p, None) for p in item.values() if isinstance(p, str))
            else:
                _referenced(item, found)
    elif isinstance(value, list):
        for item in value:
            _referenced(item, found)


def record_problems(workdir: Path) -> tuple[int, list[str]]:
    """How many (path, digest) references the step records and benchmark results under
    ``workdir`` hold, and each one that names a missing file or another digest."""
    from tfopt.optimizer.benchmark.environment import model_digest

    records = [*workdir.glob("runs/*/*/result.json"), *workdir.glob("runs/*/*/benchmark.json")]
    checked, problems = 0, []
    digests: dict[str, str] = {}
    for record in records:
        found: list[tuple[str, str | None]] = []
        _referenced(json.loads(record.read_text()), found)
        for path, digest in found:
            checked += 1
            if not os.path.exists(path):
                problems.append(f"{record}: {path} does not exist")
            elif digest is not None and digest.startswith("sha256:") and Path(path).is_dir():
                actual = digests.get(path) or digests.setdefault(path, model_digest(path))
                if actual != digest:
                    problems.append(f"{record}: {path} hashes to {actual[:19]}, recorded "
                                    f"{digest[:19]}")
    return checked, problems


def partial_leftovers(workdir: Path) -> list[Path]:
    """Staging entries (``.partial`` in the name) left anywhere under ``workdir``."""
    return sorted(p for p in workdir.rglob("*") if ".partial" in p.name)


def steps_ran_per_run_key(runs: list[Run]) -> dict[str, Counter]:
    """Per source: how many of its runs reused each step (the rest ran it)."""
    reused: dict[str, Counter] = {}
    for run in runs:
        reused.setdefault(str(run.source), Counter()).update(run.steps_reused)
    return reused
