"""Stock SavedModel call vs ONNX Runtime and OpenVINO candidates, batch 1, one process.

    .venv/bin/python benchmarks/runtimes.py [--models ResNet50,MobileNetV2] [--seconds 20]

Per model (keras.applications, weights=None, random BatchNorm statistics, logits out): the
library's own converters build ``onnx`` fp32 / optimized / dynamic_int8 / static_int8 and
``openvino`` fp32 / bf16 / int8 (the int8 flavours calibrated on 32 generated inputs: there is
no real data for these models, so their accuracy is not measured here, only their speed and
their output error), then the benchmark harness times the stock SavedModel signature call and
every candidate interleaved, call by call, at batch 1 (per-model thread counts chosen as the
pipeline chooses them). The figures to quote are the p50 ratios and their 95% intervals,
measured in this one run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import export_keras_application, model_names, work_directory, write_result

CALIBRATION_ROWS = 32


def _candidates(source: Path, workdir: Path, say) -> tuple[list, list]:
    from tfopt.optimizer.candidates.build import CandidateSettings, derive_candidates
    from tfopt.optimizer.inputs.calibration import SYNTHETIC, Calibration
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.model.savedmodel import get_signature

    signature = get_signature(source)
    calibration = Calibration(tuple(make_inputs(signature, 1, seed=i)
                                    for i in range(CALIBRATION_ROWS)), SYNTHETIC)
    say("converting (tf2onnx, ONNX Runtime, openvino.convert_model, NNCF) ...")
    return derive_candidates(source, freeze(source), workdir,
                             CandidateSettings(targets=("onnx", "openvino")),
                             calibration=calibration)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="ResNet50,MobileNetV2")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="minimum timed seconds per model")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    names = model_names(parser, args.models)

    from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    # Before the converters start TensorFlow: its pools are sized once, as the pipeline sizes
    # them (intra-op = the CPUs available, inter-op = 1).
    runtime = apply_runtime_settings(default_runtime_settings())
    workdir = work_directory(args.workdir, "tfopt-bench-runtimes-")
    rows, skipped_all = [], {}
    for name in names:
        def say(message, name=name):
            print(f"{name}: {message}", flush=True)

        stock = export_keras_application(name, workdir, random_batch_norm=True, logits=True)
        made, skipped = _candidates(stock, workdir / f"{name}_candidates", say)
        skipped_all[name] = {s.label: s.reason for s in skipped}
        for s in skipped:
            say(f"{s.label} skipped: {s.reason}")
        result = run_benchmark(
            Subject.baseline(stock, label="stock"),
            [Subject.candidate(c.path, label=c.label) for c in made],
            BenchmarkConfig(batch_sizes=(1,), warmup=5, min_runs=30, min_seconds=args.seconds),
            runtime=runtime, progress=say)
        base = result.baseline.latency[1].p50
        for m in result.candidates:
            interval = result.ratios[m.label][1]
            rows.append({
                "model": name, "candidate": m.label, "runtime": m.runtime,
                "threads": m.num_threads, "rounds": len(m.samples[1]),
                "stock_p50_ms": round(base * 1e3, 3),
                "p50_ms": round(m.latency[1].p50 * 1e3, 3),
                "p50_ratio": round(interval.ratio, 4),
                "ratio_ci95": [round(interval.low, 4), round(interval.high, 4)],
                "speedup": round(1 / interval.ratio, 3),
                "max_abs_diff": m.fidelity.max_abs_diff if m.fidelity else None,
                "size_bytes": m.size_bytes})

    print(f"\n{'model':<12} {'candidate':<18} {'thr':>3} {'stock p50':>10} {'p50':>9} "
          f"{'ratio [95% CI]':>22} {'speedup':>8} {'max|diff|':>10}")
    for r in rows:
        low, high = r["ratio_ci95"]
        print(f"{r['model']:<12} {r['candidate']:<18} {r['threads']:>3} "
              f"{r['stock_p50_ms']:>8.2f}ms {r['p50_ms']:>7.2f}ms "
              f"{r['p50_ratio']:>6.3f} [{low:.3f}, {high:.3f}] {r['speedup']:>7.2f}x "
              f"{r['max_abs_diff']:>10.2e}")
    print(f"\nresults: {write_result('runtimes', {'rows': rows, 'skipped': skipped_all})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
