"""Where the candidates stage's time goes: each candidate build of ``tfopt optimize --targets
...`` on one model family, timed one worker process at a time as the optimize step runs them.

    .venv/bin/python benchmarks/candidate_builds.py [--families resnet50] [--workdir DIR]
        [--targets savedmodel,litert,onnx,openvino] [--samples N]

For each family of ``benchmarks/families.py`` (its stock model, exported or reused from the
work directory) this optimizes the frozen graph with the inference recipe, then builds every
candidate ``--targets`` asks for exactly as :func:`tfopt.optimizer.candidates.build.derive_candidates` does
(one worker process per build group, :func:`tfopt.optimizer.candidates.build.build_plan`), on inputs
generated from the signature as a user without data gets (``calibration: synthetic``), and
prints per group the wall seconds (what a user waits for; the machine's load, printed, stretches
them) and the worker's CPU seconds (hardly stretched by load: compare runs by these), and the
largest worker's peak memory so far, and logs each flavour's peak and each
worker's process-tree peak (the figures behind ``optimizer/candidates/build_estimates.py``). A
build time is not a speed ratio: it takes no lock.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))
from families import ALL_TARGETS, FAMILIES


def time_builds(src: Path, workdir: Path, targets: str, samples: int | None) -> dict:
    from tfopt.optimizer.candidates.build import (
        SAVEDMODEL_VARIANTS,
        CandidateSettings,
        build_plan,
        parse_targets,
    )
    from tfopt.optimizer.candidates.worker import build_in_worker
    from tfopt.optimizer.inputs.calibration import synthetic
    from tfopt.optimizer.model.op_scan import DEFAULT_POLICY
    from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE, get_signature
    from tfopt.optimizer.optimize.flow import optimize
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE
    from tfopt.optimizer.system.memory_budget import memory_budget

    settings = CandidateSettings(targets=parse_targets(targets))
    if samples is not None:
        settings = CandidateSettings(targets=settings.targets, calibration_samples=samples)
    started = time.perf_counter()
    result = optimize(src, INFERENCE_RECIPE, DEFAULT_SIGNATURE)
    optimize_seconds = time.perf_counter() - started
    calibration = (synthetic(get_signature(src, DEFAULT_SIGNATURE),
                             settings.calibration_samples) if settings.calibrates else None)
    # the machine's: the watchdog stops nothing here, and logs each worker's process tree
    budget = memory_budget()
    groups = []
    groups_planned, dominated = build_plan(src, settings)
    for skip in dominated:
        print(f"  {skip.label:<55} skipped: {skip.reason[:100]}", flush=True)
    for labels in groups_planned:
        load = os.getloadavg()[0]
        started, cpu = time.perf_counter(), _children_cpu_seconds()
        made, skipped = build_in_worker(
            src, result.candidate.model if any(lb in SAVEDMODEL_VARIANTS for lb in labels)
            else None, workdir, settings, labels, signature=DEFAULT_SIGNATURE,
            calibration=calibration, source_digest=None, policy=DEFAULT_POLICY,
            budget=budget)
        seconds, cpu = time.perf_counter() - started, _children_cpu_seconds() - cpu
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
        groups.append({"labels": list(labels), "seconds": seconds, "cpu_seconds": cpu,
                       "load": load, "largest_worker_peak_gib": peak,
                       "made": [c.label for c in made],
                       "skipped": {s.label: s.reason for s in skipped}})
        print(f"  {', '.join(labels):<55} {seconds:7.1f} s wall {cpu:7.1f} s CPU  (load "
              f"{load:.1f}, largest worker so far {peak:.2f} GiB)"
              + (f"  skipped: {skipped[0].reason[:80]}" if skipped else ""), flush=True)
    return {"optimize_seconds": optimize_seconds, "groups": groups,
            "candidates_seconds": sum(g["seconds"] for g in groups),
            "candidates_cpu_seconds": sum(g["cpu_seconds"] for g in groups),
            "calibration_samples": settings.calibration_samples}


def _children_cpu_seconds() -> float:
    """User + system CPU seconds of the worker processes that have exited so far: unlike wall
    time, hardly stretched by a loaded machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="resnet50")
    parser.add_argument("--workdir", type=Path, default=ROOT.parent / "work" / "families")
    parser.add_argument("--targets", default=ALL_TARGETS)
    parser.add_argument("--samples", type=int, default=None,
                        help="calibration samples (default: the candidates setting's)")
    args = parser.parse_args()
    # the workers log at this level: each flavour's peak is an INFO line
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    results = {}
    for name in args.families.split(","):
        family = FAMILIES[name.strip()]
        src = family.export(args.workdir.resolve() / family.name)
        print(f"{family.name}: {src} (load {os.getloadavg()[0]:.1f})", flush=True)
        with tempfile.TemporaryDirectory(prefix="candidate_builds-") as tmp:
            results[family.name] = time_builds(src, Path(tmp), args.targets, args.samples)
        r = results[family.name]
        print(f"{family.name}: optimize {r['optimize_seconds']:.1f} s, candidates "
              f"{r['candidates_seconds']:.1f} s wall, {r['candidates_cpu_seconds']:.1f} s CPU "
              f"({r['calibration_samples']} calibration samples)", flush=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
