"""Peak memory of runtime tuning against its memory budget (issue 18), on a bf16 ResNet50.

Tuning starts one probe process per thread setting, each holding the model. This measures
:func:`tfopt.optimizer.runtime_tuning.tune_runtime` on the bf16 candidate of
``keras.applications.ResNet50(weights=None)`` (random BatchNorm statistics, logits: the
``resnet50`` family of ``benchmarks/families.py``), built once as ``tfopt optimize --targets
savedmodel`` builds it (the inference recipe, then the ``bf16`` build in a worker process,
:func:`tfopt.optimizer.candidates.worker.build_in_worker`) and kept in the work directory.

Each budget is tuned in a fresh process that has imported TensorFlow first, as the gate step's
and ``tfopt optimize --tune``'s processes have, with tune_runtime's defaults (what ``tfopt
optimize --tune`` runs: 10 rounds of 0.5 s, the batch curve within 60 s). The whole process
tree's resident memory (the tuning process and every probe) is sampled every 0.2 s
(:class:`tfopt.optimizer.system.process_tree.TreeMeter`); printed per budget: the tree's peak
against the budget, the probes started and stopped, the settings measured, the wall time and
the load average (the machine is shared: wall times stretch with it, memory does not).

    .venv/bin/python benchmarks/tuning_memory.py [--budgets-gb 3,8] [--workdir work/bench/tuning]

Measured in r25 (``flock /work/wt/mem.lock nice -n 19 ... --budgets-gb 3,5,8``; 2 CPUs shared
with other developers' jobs, load average 3.4-6.0: wall times are stretched, memory is not).
The bf16 SavedModel is 48.8 MiB; its reference probe [intra=2 inter=1] peaked at 1.66-1.67 GiB
(``VmHWM``), counted at 1.92 GiB with the 15% margin; the tuning process with TensorFlow
imported holds 0.78 GiB:

======  ==============  ================  ===========  ===============================
budget  probes started  tree peak         tuning wall  left out (one line)
======  ==============  ================  ===========  ===============================
3 GiB   1 (reference)   2.40 GiB          84 s         3 settings: 0 more fit in 1.16
5 GiB   2               3.45 GiB          170 s        2 settings: 1 more fit in 3.16
8 GiB   4               6.64 GiB          154 s        none (3 more fit in ~6.1)
======  ==============  ================  ===========  ===============================

An earlier run the same day: 3 GiB 2.42 GiB, 1 probe, 99 s (load 4.6-5.7); 8 GiB 6.02 GiB, 4
probes, 246 s (load 5.9-6.7). No probe was stopped. Before (the load estimate, every probe at
once): 3 GiB started 2 probes and peaked at 3.56 GiB; 8 GiB started 4 and peaked at 6.33 GiB.

Again on main after the merge (03bfab0), on a quiet machine (load 0.5-2.1), the same bf16 model:
``flock /work/wt/mem.lock .venv/bin/python benchmarks/tuning_memory.py --budgets-gb 3,8
--workdir /work/wt/r25-tune/work/bench/tuning``: 3 GiB, 1 probe, tree peak 2.38 GiB, 68 s;
8 GiB, 4 probes, 6.21 GiB, 104 s. Both within the budget, no probe stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

GIB = 2**30


def bf16_resnet50(workdir: Path) -> Path:
    """The bf16 candidate of the ``resnet50`` family, built once into ``workdir``."""
    kept = workdir / "resnet50_bf16"
    if (kept / "saved_model.pb").is_file():
        return kept
    from families import FAMILIES

    from tfopt.optimizer.candidates.build import CandidateSettings
    from tfopt.optimizer.candidates.worker import build_in_worker
    from tfopt.optimizer.model.op_scan import DEFAULT_POLICY
    from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
    from tfopt.optimizer.optimize.flow import optimize
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE

    src = FAMILIES["resnet50"].export(workdir)
    optimized = optimize(src, INFERENCE_RECIPE, DEFAULT_SIGNATURE).candidate.model
    with tempfile.TemporaryDirectory(prefix="tuning_memory-", dir=workdir) as scratch:
        made, skipped = build_in_worker(
            src, optimized, Path(scratch), CandidateSettings(savedmodel_variants=("bf16",)),
            ["bf16"], signature=DEFAULT_SIGNATURE, calibration=None, source_digest=None,
            policy=DEFAULT_POLICY)
        if not made:
            raise SystemExit(f"no bf16 candidate: {skipped[0].reason if skipped else '?'}")
        os.replace(made[0].path, kept)
    return kept


def tune_within(model: Path, budget_gb: float) -> dict:
    """Tune ``model`` within ``budget_gb`` in this process, the tree sampled: the figures."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()  # as the gate step's process has it
    from tfopt.optimizer.errors import TfoptError
    from tfopt.optimizer.model.savedmodel import directory_size
    from tfopt.optimizer.runtime_tuning import tune_runtime
    from tfopt.optimizer.system.memory_budget import MemoryBudget
    from tfopt.optimizer.system.process_tree import TreeMeter

    said: list[str] = []

    def say(message: str) -> None:
        said.append(message)
        print(f"  {message}", flush=True)

    budget = MemoryBudget(int(budget_gb * GIB), "--budgets-gb")
    load = os.getloadavg()[0]
    refused = None
    with TreeMeter() as meter:
        try:
            tuned = tune_runtime(model, progress=say, budget=budget)
        except TfoptError as exc:
            tuned, refused = None, str(exc)
    more = [int(m.group(1)) for line in said
            if (m := re.match(r"starting (\d+) more probe", line))]
    stopped = [line for line in said if "left out: stopped at" in line]
    return {"budget_gb": budget_gb, "model_bytes": directory_size(model),
            "peak_gib": meter.cost.peak_rss_bytes / GIB, "wall_seconds": meter.cost.wall_seconds,
            "load_start": load, "load_end": os.getloadavg()[0],
            "probes_started": (1 if any("alone" in line for line in said) else 0) + sum(more),
            "probes_stopped": stopped,
            "left_out": [line for line in said if "left out" in line],
            "settings_measured": [p.setting.label for p in tuned.thread_probes] if tuned else [],
            "best": tuned.threads.label if tuned else None,
            "batch_curve": [p.batch_size for p in tuned.batch_curve] if tuned else [],
            "refused": refused}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets-gb", default="3,8")
    parser.add_argument("--workdir", type=Path, default=ROOT.parent / "work" / "bench" / "tuning")
    parser.add_argument("--tune", type=Path, help=argparse.SUPPRESS)  # the child's model
    parser.add_argument("--budget-gb", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.tune is not None:
        print("RESULT " + json.dumps(tune_within(args.tune, args.budget_gb)), flush=True)
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    model = bf16_resnet50(args.workdir.resolve())
    rows = []
    for budget_gb in (float(b) for b in args.budgets_gb.split(",")):
        print(f"budget {budget_gb:g} GiB: tuning {model} (load {os.getloadavg()[0]:.1f})",
              flush=True)
        started = time.perf_counter()
        child = subprocess.run([sys.executable, __file__, "--tune", str(model),
                                "--budget-gb", str(budget_gb)],
                               stdout=subprocess.PIPE, text=True, check=True)
        for line in child.stdout.splitlines():
            if line.startswith("RESULT "):
                rows.append(json.loads(line[len("RESULT "):]))
            else:
                print(line, flush=True)
        r = rows[-1]
        print(f"budget {budget_gb:g} GiB: tree peak {r['peak_gib']:.2f} GiB "
              f"({'within' if r['peak_gib'] <= budget_gb else 'OVER'}), "
              f"{r['probes_started']} probes started, {len(r['probes_stopped'])} stopped, "
              f"measured {r['settings_measured']}, tuning {r['wall_seconds']:.0f} s "
              f"({time.perf_counter() - started:.0f} s with the process's start), load "
              f"{r['load_start']:.1f} -> {r['load_end']:.1f}", flush=True)
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
