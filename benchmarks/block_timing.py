"""Which interleaving ranks candidates as a serving process sees them: one call per model per
round, blocks of consecutive calls, against each candidate timed alone.

    .venv/bin/python benchmarks/block_timing.py [--models digits,MobileNetV2] [--seconds 10]
        [--min-runs 30] [--block-size 10] [--passes 5] [--alone-seconds 1]
        [--litert-threads N] [--accuracy-budget 0.005] [--workdir DIR] [--print-only]

Per model, the candidates of ``benchmarks/candidates.py`` (optimized fp32, bf16 where the CPU
has it, XLA, LiteRT fp32 / fp16 / dynamic-range int8 / full int8; ``digits`` is the demo's CNN
trained on scikit-learn's digits, full int8 calibrated on its eval inputs; ``MobileNetV2`` is
``keras.applications`` with ``weights=None``, calibrated on generated inputs) and the stock
SavedModel, timed at batch 1 three ways in one process:

- ``one call``: the benchmark harness with ``block_size=1``, one call of each model per round
  (the order rotating), as it timed before blocks;
- ``blocks``: the harness with ``--block-size`` consecutive timed calls per model per round,
  after one untimed call;
- ``alone``: each model on its own, models in turn for ``--passes`` passes, each pass a warm-up
  then consecutive calls for ``--alone-seconds``; the median pass's p50. This is the steady
  state a serving process sees, and the reference the two others are judged by.

A per-model runtime (LiteRT) runs at the thread count the ``blocks`` run chose for it, in all
three, or at ``--litert-threads``. Reported per candidate: p50 and speedup over the stock model
each way; per way, the pairs of candidates ranked in another order than ``alone``, among all
pairs and among the pairs that ``alone`` tells apart by more than 10%; the largest factor
between a candidate's speedup that way and alone; the median width of the candidates' 95%
intervals (as a share of the ratio: blocks fit fewer rounds into ``--seconds``); and the gate's
choice (``--accuracy-budget``) from each interleaved timing. Ratios are within one process and one
run; absolute times move with the machine's load.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))
from candidates import build_candidates
from common import add_result_arguments, read_result, work_directory, write_result

DEFAULT_MODELS = "digits,MobileNetV2"
CLEARLY_APART = 1.10  # alone, the slower of a pair takes at least this many times the faster's


def _time_alone(subjects, passes: int, seconds: float) -> dict[str, float]:
    import numpy as np

    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.runtime import load_runner

    calls = {}
    for subject in subjects:
        runner = load_runner(subject.path, format=subject.format,
                             num_threads=subject.num_threads)
        tensors = runner.to_tensors(make_inputs(runner.signature, 1, 0))
        calls[subject.label] = lambda r=runner, t=tensors: r.call(t)
    p50s: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(passes):
        for label, call in calls.items():
            p50s[label].append(time_interleaved({label: call}, warmup=20, min_runs=50,
                                                min_seconds=seconds)[label].p50)
    return {label: float(np.median(values)) for label, values in p50s.items()}


def _discordant(p50: dict[str, float], alone: dict[str, float]) -> tuple[list, list]:
    """Pairs ordered otherwise than alone: all of them, and those alone tells clearly apart."""
    flipped, clear = [], []
    for a, b in combinations(sorted(alone), 2):
        if (p50[a] < p50[b]) != (alone[a] < alone[b]):
            flipped.append([a, b])
            if max(alone[a], alone[b]) >= CLEARLY_APART * min(alone[a], alone[b]):
                clear.append([a, b])
    return flipped, clear


def _median(by_label: dict[str, float]) -> float:
    import statistics

    return statistics.median(by_label.values())


def measure_model(name: str, workdir: Path, args, runtime) -> dict:
    from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
    from tfopt.optimizer.gate.verdict import GateConfig, evaluate_gate

    stock, eval_data, candidates, skipped = build_candidates(name, workdir)
    say = (lambda message: print(f"  {message}", flush=True))
    baseline = Subject.baseline(stock, label="stock")
    subjects = [Subject.candidate(c.path, label=c.label, format=c.format) for c in candidates]
    if args.litert_threads is not None:
        subjects = [dataclasses.replace(s, num_threads=args.litert_threads)
                    if s.format == "tflite" else s for s in subjects]
    gate = GateConfig(max_accuracy_drop_abs=args.accuracy_budget)
    results, chosen = {}, {}
    for way, block_size in (("blocks", args.block_size), ("one call", 1)):
        started = time.perf_counter()
        config = BenchmarkConfig(batch_sizes=(1,), warmup=5, min_runs=args.min_runs,
                                 min_seconds=args.seconds, block_size=block_size)
        result = run_benchmark(baseline, subjects, config, runtime=runtime,
                               eval_data=eval_data, progress=say)
        results[way], chosen[way] = result, evaluate_gate(result, gate).chosen
        print(f"{name}: {way} timed in {time.perf_counter() - started:.0f}s", flush=True)
        # the same thread counts for every way: the ones the blocks run chose
        threads = {m.label: m.num_threads for m in result.candidates}
        subjects = [dataclasses.replace(s, num_threads=threads[s.label]) for s in subjects]
    started = time.perf_counter()
    alone = _time_alone([baseline, *subjects], args.passes, args.alone_seconds)
    print(f"{name}: alone timed in {time.perf_counter() - started:.0f}s", flush=True)

    p50 = {way: {m.label: m.latency[1].p50 for m in r.models} for way, r in results.items()}
    p50["alone"] = alone
    labels = [m.label for m in results["blocks"].candidates]
    out = {"model": name, "block_size": args.block_size, "skipped": [s.reason for s in skipped],
           "threads": {m.label: m.num_threads for m in results["blocks"].candidates},
           "rounds": {way: r.ratios[labels[0]][1].rounds for way, r in results.items()},
           # the 95% interval of each candidate's ratio to stock, as a share of the ratio
           "interval_width": {way: {label: (r.ratios[label][1].high - r.ratios[label][1].low)
                                    / r.ratios[label][1].ratio for label in labels}
                              for way, r in results.items()},
           "p50_ms": {way: {k: v * 1e3 for k, v in by.items()} for way, by in p50.items()},
           "speedup": {way: {label: by["stock"] / by[label] for label in labels}
                       for way, by in p50.items()},
           "chosen": chosen,
           "fastest": {way: min(labels, key=by.get) for way, by in p50.items()}}
    for way in results:
        out.setdefault("discordant", {})[way], out.setdefault("clearly_discordant", {})[way] = \
            _discordant({k: p50[way][k] for k in ["stock", *labels]}, alone)
        # how far this way's speedups are from alone's, as a factor (1.0: the same)
        off = {label: out["speedup"][way][label] / out["speedup"]["alone"][label]
               for label in labels}
        out.setdefault("speedup_off_by", {})[way] = max(max(r, 1 / r) for r in off.values())
    return out


def print_tables(models: list[dict]) -> None:
    ways = ("one call", "blocks", "alone")
    for m in models:
        print(f"\n{m['model']} (batch 1; blocks of {m['block_size']}; rounds: "
              f"{', '.join(f'{w} {n}' for w, n in m['rounds'].items())})")
        print("| candidate | threads | " + " | ".join(f"{w} p50 ms | {w} speedup" for w in ways)
              + " |")
        print("|---|---:|" + "---:|---:|" * len(ways))
        print("| stock | - | " + " | ".join(f"{m['p50_ms'][w]['stock']:.4f} | 1.00x"
                                            for w in ways) + " |")
        for label in sorted(m["speedup"]["alone"], key=lambda k: -m["speedup"]["alone"][k]):
            print(f"| {label} | {m['threads'].get(label) or '-'} | " + " | ".join(
                f"{m['p50_ms'][w][label]:.4f} | {m['speedup'][w][label]:.2f}x" for w in ways)
                  + " |")
        pairs = len(m["p50_ms"]["alone"]) * (len(m["p50_ms"]["alone"]) - 1) // 2
        for way in ("one call", "blocks"):
            flipped, clear = m["discordant"][way], m["clearly_discordant"][way]
            print(f"{way}: {len(flipped)}/{pairs} pairs ordered otherwise than alone"
                  + (f" ({', '.join('/'.join(p) for p in flipped)})" if flipped else "")
                  + f"; {len(clear)} of them more than {CLEARLY_APART:.2f}x apart alone"
                  + f"; speedups up to {m['speedup_off_by'][way]:.2f}x off alone's"
                  + f"; median interval width {_median(m['interval_width'][way]):.1%}"
                  + f"; fastest {m['fastest'][way]}; gate chose {m['chosen'][way] or 'none'}")
        print(f"alone: fastest {m['fastest']['alone']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="minimum timed seconds of each interleaved run")
    parser.add_argument("--min-runs", type=int, default=30, dest="min_runs")
    parser.add_argument("--block-size", type=int, default=10, dest="block_size")
    parser.add_argument("--passes", type=int, default=5, help="passes of the alone timing")
    parser.add_argument("--alone-seconds", type=float, default=1.0, dest="alone_seconds",
                        help="timed seconds of each model per pass, alone")
    parser.add_argument("--litert-threads", type=int, default=None, dest="litert_threads",
                        help="LiteRT threads (default: the harness's choice)")
    parser.add_argument("--accuracy-budget", type=float, default=0.005, dest="accuracy_budget")
    add_result_arguments(parser, "block_timing")
    args = parser.parse_args()
    if args.print_only:
        print_tables(read_result(args.result_name)["models"])
        return 0

    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    runtime = apply_runtime_settings(default_runtime_settings())  # before TensorFlow starts
    workdir = work_directory(args.workdir, "tfopt-bench-block-timing-")
    models, target = [], None
    for name in args.models.split(","):
        models.append(measure_model(name, workdir, args, runtime))
        target = write_result(args.result_name, {"args": vars(args) | {"workdir": str(workdir)},
                                               "models": models})
    print_tables(models)
    print(f"\nresults: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
