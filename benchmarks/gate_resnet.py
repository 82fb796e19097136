"""ResNet50 (keras.applications, weights=None): frozen vs stock SavedModel at batch 1, through
the gate's own benchmark harness; prints the p50 ratio, its confidence interval and the width.

    .venv/bin/python benchmarks/gate_resnet.py [--seconds 60] [--min-runs 100] [--workdir DIR]

The interval width says how precisely this machine, loaded as it is now, can measure a
difference: a gate with ``min_speedup`` below roughly half the width cannot promote anything.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import export_keras_application, write_result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="minimum timed seconds")
    parser.add_argument("--min-runs", type=int, default=100, help="minimum timed rounds")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    runtime = apply_runtime_settings(default_runtime_settings())  # before TF starts

    from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
    from tfopt.optimizer.gate.verdict import evaluate_gate
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tfopt-gate-resnet-"))
    started = time.perf_counter()
    print("ResNet50: exporting, freezing ...", flush=True)
    stock = export_keras_application("ResNet50", workdir)
    frozen = workdir / "ResNet50_frozen"
    if not (frozen / "saved_model.pb").is_file():
        write_saved_model(freeze(stock), frozen, overwrite=True)
    print(f"ResNet50: timing stock vs frozen at batch 1 for at least {args.seconds:g}s "
          f"and {args.min_runs} rounds ...", flush=True)
    config = BenchmarkConfig(batch_sizes=(1,), warmup=5, min_runs=args.min_runs,
                             min_seconds=args.seconds)
    result = run_benchmark(Subject.baseline(stock), [Subject.candidate(frozen)], config,
                           runtime=runtime, progress=lambda m: print(f"  {m}", flush=True))
    interval = result.ratios[frozen.name][1]
    base, cand = result.baseline.latency[1], result.candidates[0].latency[1]
    verdict = evaluate_gate(result).verdicts[0]

    print()
    print(f"environment        {result.environment.summary()}")
    print(f"rounds             {interval.rounds} (block {interval.block}, "
          f"{interval.resamples} resamples)")
    print(f"stock p50          {base.p50 * 1e3:.2f} ms (p90 {base.p90 * 1e3:.2f}, "
          f"p99 {base.p99 * 1e3:.2f})")
    print(f"frozen p50         {cand.p50 * 1e3:.2f} ms (p90 {cand.p90 * 1e3:.2f}, "
          f"p99 {cand.p99 * 1e3:.2f})")
    print(f"ratio frozen/stock {interval.ratio:.4f}  "
          f"{interval.confidence * 100:g}% CI [{interval.low:.4f}, {interval.high:.4f}]  "
          f"width {interval.width:.4f}")
    print(f"speedup            {interval.speedup:.3f}x  "
          f"CI [{1 / interval.high:.3f}x, {1 / interval.low:.3f}x]")
    print(f"fidelity           max abs diff {result.candidates[0].fidelity.max_abs_diff:.3g}, "
          f"top-1 agreement {result.candidates[0].fidelity.top1_agreement}")
    print(f"gate (defaults)    {verdict.summary()}")
    print(f"wall time          {time.perf_counter() - started:.0f}s")
    path = write_result("gate_resnet", {
        "model": "ResNet50", "batch": 1, "rounds": interval.rounds,
        "stock_p50_ms": base.p50 * 1e3, "frozen_p50_ms": cand.p50 * 1e3,
        "ratio": interval.ratio, "ci_low": interval.low, "ci_high": interval.high,
        "ci_width": interval.width, "confidence": interval.confidence,
        "speedup": interval.speedup, "gate": verdict.to_dict(),
        "environment": result.environment.to_dict()})
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
