"""The gate's power and false-promotion rate: each scenario repeated through the real harness
(``run_benchmark``) and gate (``evaluate_gate``) at the pipeline's default benchmark settings.

    .venv/bin/python benchmarks/gate_power.py [--repeats 20] [--scenarios aa,resnet,three,busy]
                                              [--workdir DIR]
    .venv/bin/python benchmarks/gate_power.py --statistics RESULT.json

Scenarios (what a sound gate does, at ``min_speedup`` 1.05 and a 95% interval):

- ``aa``: A/A, a small convnet against a copy of itself: promotes 0 times;
- ``resnet``: frozen ResNet50 (``keras.applications.ResNet50(weights=None)``) against the stock
  SavedModel, a real ~1.25x: promotes at least 19 times in 20;
- ``three``: the optimized convnet against itself plus ~3% of output-neutral work (a real 3%
  speedup, under the 5% bar): promotes 0 times;
- ``busy``: A/A while two busy-looping processes compete for the 2 CPUs: promotes 0 times.

Each repetition is a fresh ``run_benchmark`` at the default ``BenchmarkConfig`` (models loaded
again, a twin of the baseline, warm-up, at least 50 rounds and 5 s, blocks of up to 10 calls
scaled to the call time, more rounds while the interval straddles the bound), then
``evaluate_gate`` with the default ``GateConfig``. Printed per
scenario: promotions, the ratio and interval width (median and extremes), rounds, and the
reasons the failed checks give. Results go to ``benchmarks/results/gate_power.json``.

AFTER the method change (docs/gate.md, "The gate's power"), measured 2026-11-24 on the shared
2-CPU machine at load averages of 15-28 (other developers' jobs, and part of the time this
branch's own tests and benchmarks/concurrent_runs.py), two processes side by side:
``--scenarios resnet --repeats 20`` (wall ~45 min) and ``--scenarios aa,three,busy --repeats 20
--result-name gate_power_small`` (1298 s):

| scenario | target | promoted | median ratio | median interval width | s/run |
|---|---|---|---|---|---|
| A/A convnet | 0 | 0/20 | 0.991 | 0.093 | 9 |
| A/A under a 2-core busy loop | 0 | 0/20 | 0.980 | 0.169 | 10 |
| optimized vs itself + neutral work | 0 | 0/20 | 0.987 | 0.067 | 32 |
| frozen vs stock ResNet50 | >= 19/20 | 19/20 | 0.830 | 0.062 | 121 |

- ``resnet``: the runs used the twin's discrepancy as the end of its interval (the first
  version of the rule) and promoted 17/20; the final rule (the twin's point ratio,
  ``stats.twin_discrepancy``) applied to the same runs' figures promotes 19/20, and without
  a twin also 19/20. The one reject (ratio 0.819, interval [0.717, 0.958]) was timed at a load
  average of 25.7 while 12 whole pipeline runs ran beside it. Every run was timed one call
  per round (``block_seconds``); median 50 rounds, 53-410 s per run (median 121 s, against
  129-366 s before at a lighter load); 4 runs went on past 50 rounds (63-79), under the 60 s
  cap this run had (the default is now 4 x ``min_seconds``, 20 s, which these runs had
  passed by their 50th round).
- ``aa``, ``three``, ``busy``: 0 promotions by either rule (and by none: no run's interval
  lay wholly below 1/1.05). The twin's discrepancy (point ratio) had a median of 1.022 on the
  convnet, 1.007 on MobileNetV2, 1.045 under the busy loop. At a load of 23-28 from others,
  two more busy loops change little: ``busy`` here measures much the same as ``aa``. In
  ``three`` the neutral work (128x128, +3.8% by the quick calibration) measured only +1.3%
  (median) over the 20 runs: the planted slowdown was smaller than intended.


BEFORE it (blocks of 10, the ratio of the two models' medians, no twin, no adaptive stopping),
measured 2026-11-24 on the shared 2-CPU machine, load average 7-18 (other jobs, and this
project's tests part of the time), ``--repeats 20 --resnet-repeats 10`` (10 ResNet50
repetitions, not 20, for time), wall time 3317 s:

- ``aa``: 0/20 promoted, but the 95% interval excluded 1.0 in 8 of 20 A/A runs (nominally 1):
  two loads of one model differ systematically (median ratio 0.988; the known finding: two
  LiteRT interpreters of one ~10 us model in a process differ by up to 9% while the round
  bootstrap's interval is ~0.1% wide). Only ``min_speedup`` 1.05 keeps A/A from promoting.
- ``busy``: 1/20 promoted (ratio 0.836, interval [0.621, 0.936], 63 rounds): under contention
  the interval is too narrow for the 5% margin. A false promotion the gate should not make.
- ``three``: 0/20 promoted (MobileNetV2, +4.0% neutral work by the quick calibration), but the
  intervals were 0.33 wide (median, 50 rounds): the gate is safe here by being blind.
- ``resnet``: 8/10 promoted (ratio 0.77-0.89, median 0.830, interval width median 0.18): below
  the >= 19/20 target. Every run stopped at the minimum of 50 rounds (129-366 s each, 22 calls
  of ~100-300 ms per round under this load); the two rejects had upper bounds 1.015 and 1.047. The round count, not the seconds,
  binds for a slow model; the interval's width falls about as 1/sqrt(rounds), so ``min_runs``
  200 would halve it, at 4x the benchmark time (~12 min for ResNet50 at this load, ~4-5 min on
  a quiet machine), or ``block_size`` 3 would give ~2.7x the rounds in the same time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import export_keras_application, work_directory, write_result

SCENARIOS = ("aa", "resnet", "three", "busy")
EXPECTED = {"aa": "0 promotions", "resnet": ">= 19 of 20 promotions", "three": "0 promotions",
            "busy": "0 promotions"}
TARGET_NEUTRAL = 1.03


def _convnet(workdir: Path) -> Path:
    import model_zoo

    path = workdir / "convnet"
    if not (path / "saved_model.pb").is_file():
        model_zoo.keras_cnn(path)
    return path


def _copy(path: Path, name: str) -> Path:
    """The same model under another digest (one more file in ``assets.extra``, which no loader
    reads), so that the gate's ``differs_from_baseline`` check does not hide what the latency
    check would do with an A/A pair."""
    copy = path.parent / name
    if not copy.exists():
        shutil.copytree(path, copy)
        (copy / "assets.extra").mkdir(exist_ok=True)
        (copy / "assets.extra" / "gate_power_aa.txt").write_text("A/A copy\n")
    return copy


def _optimized_pair(source: Path, workdir: Path, runtime) -> tuple[Path, Path, float]:
    """The optimized model, and it plus output-neutral work sized to ~3% of its latency
    (chosen by short interleaved timings); returns the measured ratio of the pick. The small
    convnet is too fast for this: the smallest neutral chain (a handful of ops) already adds
    ~10% to it, so MobileNetV2 (~10-20 ms a call) is used."""
    from benchmark_testing import with_output_neutral_work

    from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.optimize.flow import apply_recipe
    from tfopt.optimizer.optimize.recipe import DEPLOYMENT_RECIPE, Recipe

    frozen = freeze(source)
    optimized = apply_recipe(frozen, Recipe.from_string(DEPLOYMENT_RECIPE)).model
    fast = workdir / "optimized"
    if not (fast / "saved_model.pb").is_file():
        write_saved_model(optimized, fast, overwrite=True)
    best = None
    for size in (128, 192, 256, 384, 512, 768):
        slowed = workdir / f"optimized_plus_{size}"
        if not (slowed / "saved_model.pb").is_file():
            write_saved_model(with_output_neutral_work(optimized, size=size, steps=2), slowed,
                              overwrite=True)
        quick = BenchmarkConfig(min_runs=30, min_seconds=2.0)
        result = run_benchmark(Subject.baseline(fast), [Subject.candidate(slowed)], quick,
                               runtime=runtime)
        ratio = result.ratios[slowed.name][1].ratio
        print(f"  neutral work {size}x{size}: x{ratio:.3f}", flush=True)
        if best is None or abs(ratio - TARGET_NEUTRAL) < abs(best[1] - TARGET_NEUTRAL):
            best = (slowed, ratio)
        if ratio > TARGET_NEUTRAL + 0.02:
            break
    return fast, best[0], best[1]


def _busy_loops(count: int = 2) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def _repeat(name: str, baseline: Path, candidate: Path, repeats: int, runtime,
            busy: bool = False) -> dict:
    from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
    from tfopt.optimizer.benchmark.stats import twin_discrepancy
    from tfopt.optimizer.gate.verdict import evaluate_gate

    runs = []
    for i in range(repeats):
        loops = _busy_loops() if busy else []
        try:
            started = time.perf_counter()
            result = run_benchmark(Subject.baseline(baseline, label="baseline"),
                                   [Subject.candidate(candidate, label="candidate")],
                                   BenchmarkConfig(), runtime=runtime)
            seconds = time.perf_counter() - started
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
        decision = evaluate_gate(result)
        interval = decision.intervals["candidate"][decision.latency_batch_size]
        verdict = decision.verdicts[0]
        failed = [c.name for c in verdict.checks if not c.passed]
        twin = decision.twin.get(decision.latency_batch_size)
        runs.append({"promote": decision.promote, "latency_passed": "latency" not in failed,
                     "twin_discrepancy": twin_discrepancy(twin),
                     "twin_ratio": twin.ratio if twin else None,
                     "block_size": result.settings.block_size, "ratio": interval.ratio,
                     "low": interval.low, "high": interval.high, "width": interval.width,
                     "rounds": interval.rounds, "seconds": seconds, "failed": failed,
                     "load": os.getloadavg()[0]})
        print(f"  {name} {i + 1}/{repeats}: {'PROMOTE' if decision.promote else 'reject '} "
              f"ratio {interval.ratio:.4f} [{interval.low:.4f}, {interval.high:.4f}] "
              f"twin {twin_discrepancy(twin):.3f} block {result.settings.block_size} "
              f"rounds {interval.rounds} {seconds:.0f}s load {os.getloadavg()[0]:.1f}"
              f"{' failed: ' + ','.join(failed) if failed else ''}", flush=True)
    ratios, widths = [r["ratio"] for r in runs], [r["width"] for r in runs]
    return {"repeats": repeats, "promotions": sum(r["promote"] for r in runs),
            "latency_check_passed": sum(r["latency_passed"] for r in runs),
            "expected": EXPECTED[name], "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios),
            "width_median": statistics.median(widths), "width_max": max(widths),
            "rounds_median": statistics.median(r["rounds"] for r in runs),
            "twin_discrepancy_median": statistics.median(r["twin_discrepancy"] for r in runs),
            "seconds_median": statistics.median(r["seconds"] for r in runs),
            "failed_checks": dict(Counter(n for r in runs for n in r["failed"])),
            "runs": runs}


def compare_statistics(path: Path) -> None:
    """For a RESULT.json: the ratio of the two models' medians (the old statistic) against the
    median of the per-round ratios (the gate's), each with its circular-block-bootstrap 95%
    interval, over the first 50, 100, 200 rounds and all of them; and the load's spread."""
    import numpy as np

    from tfopt.optimizer.benchmark.result import load_result
    from tfopt.optimizer.benchmark.stats import _block_indices, default_block, p50_ratio_interval

    result = load_result(path)
    batch = min(result.settings.batch_sizes)
    base = result.round_figures(result.baseline, batch)
    print(f"baseline's round figures: coefficient of variation {base.std() / base.mean():.2f}")
    for candidate in (*result.candidates, *([result.twin] if result.twin else [])):
        cand = result.round_figures(candidate, batch)
        print(f"{candidate.label}: correlation of log round figures with the baseline's "
              f"{np.corrcoef(np.log(base), np.log(cand))[0, 1]:.2f}")
        for n in sorted({min(k, len(base)) for k in (50, 100, 200, len(base))}):
            a, b = base[:n], cand[:n]
            idx = _block_indices(np.random.default_rng(0), n, default_block(n), 2000)
            medians = np.median(b[idx], axis=1) / np.median(a[idx], axis=1)
            low, high = np.percentile(medians, [2.5, 97.5])
            per_round = p50_ratio_interval(a, b)
            print(f"  {n:>4} rounds: ratio of medians {np.median(b) / np.median(a):.3f} "
                  f"[{low:.3f}, {high:.3f}] width {high - low:.3f}; median of per-round ratios "
                  f"{per_round.ratio:.3f} [{per_round.low:.3f}, {per_round.high:.3f}] width "
                  f"{per_round.width:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="repetitions per scenario")
    parser.add_argument("--resnet-repeats", type=int, default=None,
                        help="repetitions of the ResNet50 scenario (default: --repeats)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated, of {', '.join(SCENARIOS)}")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--result-name", default="gate_power", dest="result_name",
                        help="the file under benchmarks/results/")
    parser.add_argument("--statistics", type=Path, default=None, metavar="RESULT.json",
                        help="only compare the ratio statistics on a benchmark result's raw "
                             "samples (e.g. tfopt benchmark STOCK FROZEN --block-size 1 "
                             "--min-runs 300 --json-file RESULT.json)")
    args = parser.parse_args()
    if args.statistics:
        compare_statistics(args.statistics)
        return 0
    chosen = args.scenarios.split(",")
    if unknown := [s for s in chosen if s not in SCENARIOS]:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}")

    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    runtime = apply_runtime_settings(default_runtime_settings())  # before TF starts, as a step
    workdir = work_directory(args.workdir, "tfopt-gate-power-")
    started = time.perf_counter()
    load_before = os.getloadavg()
    convnet = _convnet(workdir)
    outcome: dict[str, dict] = {}
    for name in chosen:
        print(f"{name}: {EXPECTED[name]} expected", flush=True)
        if name in ("aa", "busy"):
            outcome[name] = _repeat(name, convnet, _copy(convnet, "convnet_copy"), args.repeats,
                                    runtime, busy=name == "busy")
        elif name == "three":
            mobilenet = export_keras_application("MobileNetV2", workdir)
            fast, slowed, measured = _optimized_pair(mobilenet, workdir, runtime)
            outcome[name] = _repeat(name, slowed, fast, args.repeats, runtime)
            outcome[name]["neutral_work"] = {"model": slowed.name, "quick_ratio": measured}
        else:
            from tfopt.optimizer.model.export import write_saved_model
            from tfopt.optimizer.model.freeze import freeze

            stock = export_keras_application("ResNet50", workdir)
            frozen = workdir / "ResNet50_frozen"
            if not (frozen / "saved_model.pb").is_file():
                write_saved_model(freeze(stock), frozen, overwrite=True)
            outcome[name] = _repeat(name, stock, frozen, args.resnet_repeats or args.repeats,
                                    runtime)
        write_result(args.result_name, {"scenarios": outcome, "load_before": load_before,
                                        "complete": False})  # kept if a later one is stopped
    print()
    print(f"{'scenario':9} {'promoted':>9} {'latency ok':>10} {'expected':>24} "
          f"{'ratio med [min, max]':>26} {'CI width med/max':>17} {'rounds':>6} {'s/run':>6}")
    for name, o in outcome.items():
        print(f"{name:9} {o['promotions']:>4}/{o['repeats']:<4} "
              f"{o['latency_check_passed']:>5}/{o['repeats']:<4} {o['expected']:>24} "
              f"{o['ratio_median']:.4f} [{o['ratio_min']:.4f}, {o['ratio_max']:.4f}] "
              f"{o['width_median']:.4f}/{o['width_max']:.4f} {o['rounds_median']:>6.0f} "
              f"{o['seconds_median']:>6.1f}  failed checks: {o['failed_checks'] or '-'}")
    load_after = os.getloadavg()
    print(f"\nload average before {load_before[0]:.1f}/{load_before[1]:.1f}/{load_before[2]:.1f}, "
          f"after {load_after[0]:.1f}/{load_after[1]:.1f}/{load_after[2]:.1f}; "
          f"{os.cpu_count()} CPUs; wall time {time.perf_counter() - started:.0f}s")
    path = write_result(args.result_name, {"scenarios": outcome, "load_before": load_before,
                                           "load_after": load_after, "complete": True,
                                       "wall_seconds": time.perf_counter() - started})
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
