"""Whole pipeline runs at once over one shared work directory and one real ``mlflow server``:
do they all finish, share finished work, and never read each other's half-written output?

    .venv/bin/python benchmarks/concurrent_runs.py [--distinct 8] [--same 4] [--workdir DIR]

``--distinct`` runs each on its own source (a small Keras convnet, one seed each: distinct
digests, each its own registered model), and ``--same`` runs on one more source under one DAG
run id (the same task started several times), all ``tfopt run`` processes started together,
against one mlflow server (sqlite, artifacts served over HTTP) and one work directory, as the
Kubernetes mode's pods share one ReadWriteMany volume. Fast benchmark settings (20 rounds,
0.3 s) so that a dozen runs fit on 2 cores. Printed and written to
``benchmarks/results/concurrent_runs.json``: exit codes; wall time; per source, which steps
each run reused; the registered versions per model (the same-source runs must report one);
every path and digest named by a step record or benchmark result, checked against the files
(tests/concurrent_pipeline.py); ``.partial`` leftovers. Exit 1 when a check fails.

Measured 2026-11-24 on the shared 2-CPU machine (``--distinct 8 --same 4``, the defaults):

- before the workspace's step lock (``components/pipeline/workspace.py``), load average 8 -> 15: all
  12 runs finished (exit 3: the gate rejected the tiny convnet's candidates; each registered
  its challenger), 547 s wall; one version per registered model, the 4 same-source runs
  reported that one; 153 paths and digests in the records checked, none missing or changed;
  no ``.partial`` left. But the 4 same-source runs **reused nothing**: each ran every step
  into the one shared step directory at once, the later outputs replacing the earlier ones
  by rename under the runs reading them (byte-identical here, so no digest changed; a step
  whose output is not deterministic would leave records naming content that is gone);
- with it, load average 10 -> 26: the same, 480 s wall, and of the 4 same-source runs one ran
  each step and the other 3 waited and reused it (freeze, optimize, baseline, benchmark,
  evaluate, gate, publish: 3 reuses each).

Too slow for CI: one run of the tiny convnet takes ~30 s of CPU (TensorFlow's import, freeze,
optimize, benchmark, publish with the MLflow model), so even 2 + 2 runs are a minute or more
of the suite's 2 cores; the race the step lock fixes is tested in tests/test_workspace.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import work_directory, write_result
from concurrent_pipeline import (
    Run,
    partial_leftovers,
    record_problems,
    run_all,
    steps_ran_per_run_key,
    write_config,
    write_sources,
)

BENCHMARK = "{batch_sizes: [1], min_runs: 20, min_seconds: 0.3, warmup: 3}"
SAME_RUN_ID = "manual__same-source"


def _mlflow_server(root: Path):
    from local_ports import free_port
    from served_process import served

    port = free_port()
    command = [str(Path(sys.executable).parent / "mlflow"), "server",
               "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
               "--serve-artifacts", "--artifacts-destination", str(root / "artifacts"),
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    return f"http://127.0.0.1:{port}", served(command, f"http://127.0.0.1:{port}/health",
                                              root / "server.log", 120, cwd=root, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distinct", type=int, default=8, help="runs on distinct sources")
    parser.add_argument("--same", type=int, default=4, help="runs on one more source, one "
                                                            "DAG run id")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    root = work_directory(args.workdir, "tfopt-concurrent-")
    sources = write_sources(root / "sources", list(range(args.distinct + 1)))
    workdir = root / "work"
    runs = [Run(f"distinct-{i}", sources[i], f"scheduled__{i}", f"concurrent-{i}")
            for i in range(args.distinct)]
    runs += [Run(f"same-{i}", sources[-1], SAME_RUN_ID, "concurrent-same")
             for i in range(args.same)]
    server_root = root / "mlflow"
    server_root.mkdir(exist_ok=True)
    url, server = _mlflow_server(server_root)
    load_before = os.getloadavg()
    with server:
        configs = {run.name: write_config(root / f"{run.name}.yaml", run.source, workdir, url,
                                          run.registered_model, BENCHMARK) for run in runs}
        print(f"{len(runs)} runs start together against {url}, work directory {workdir}",
              flush=True)
        wall = run_all(runs, configs, root / "logs")
        from mlflow import MlflowClient

        client = MlflowClient(url, registry_uri=url)
        versions = {name: sorted(int(v.version) for v in client.search_model_versions(
            f"name = '{name}'")) for name in sorted({r.registered_model for r in runs})}
    load_after = os.getloadavg()

    checked, problems = record_problems(workdir)
    leftovers = partial_leftovers(workdir)
    reused = steps_ran_per_run_key(runs)
    same = [r for r in runs if r.name.startswith("same-")]
    reported = {(r.outcome or {}).get("publish", {}).get("version") for r in same}
    failures = []
    if bad := [(r.name, r.returncode) for r in runs if r.returncode not in (0, 3)]:
        failures.append(f"runs that did not finish (exit 0 promote or 3 reject): {bad}")
    if same and (len(reported) != 1 or versions["concurrent-same"] != [
            int(v) for v in reported if v is not None]):
        failures.append(f"the same-source runs reported versions {reported}, the registry "
                        f"holds {versions['concurrent-same']}")
    failures += problems
    failures += [f"left in .partial state: {p}" for p in leftovers]

    print(f"\n{'run':12} {'exit':>4} {'version':>7}  steps reused")
    for run in runs:
        version = (run.outcome or {}).get("publish", {}).get("version")
        print(f"{run.name:12} {run.returncode:>4} {version!s:>7}  "
              f"{', '.join(run.steps_reused) or '-'}")
    print(f"\nwall time {wall:.0f}s for {len(runs)} runs; exits "
          f"{sorted(r.returncode for r in runs)}")
    print(f"registered versions: {versions}")
    print(f"per source, runs that reused each step: "
          f"{ {Path(k).name: dict(v) for k, v in reused.items()} }")
    print(f"paths and digests checked in the records: {checked}, problems: {len(problems)}")
    print(f".partial leftovers: {len(leftovers)}")
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; "
          f"{os.cpu_count()} CPUs")
    for failure in failures:
        print(f"FAIL {failure}")
    path = write_result("concurrent_runs", {
        "runs": [{"name": r.name, "returncode": r.returncode, "run_id": r.run_id,
                  "version": (r.outcome or {}).get("publish", {}).get("version"),
                  "steps_reused": r.steps_reused,
                  "stderr_tail": r.stderr[-2000:] if r.returncode not in (0, 3) else ""}
                 for r in runs],
        "wall_seconds": wall, "versions": versions, "references_checked": checked,
        "problems": problems, "partial_leftovers": [str(p) for p in leftovers],
        "failures": failures, "load_before": load_before, "load_after": load_after,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    print(f"results: {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
