"""Stock SavedModel signature call vs the frozen SavedModel, p50 at batch 1, one process.

    .venv/bin/python benchmarks/freeze.py [--models ResNet50,MobileNetV2] [--seconds 20]

Both models are loaded with ``tf.saved_model.load`` and called through their
``serving_default`` signature, interleaved call by call, so background load hits both alike.
The figure to quote is the ratio, measured in this one run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import KERAS_APPLICATIONS, export_keras_application, write_result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="ResNet50,MobileNetV2")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="minimum timed seconds per model pair")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.runtime import load_runner
    from tfopt.optimizer.verify.equivalence import compare

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tfopt-bench-freeze-"))
    rows = []
    for name in args.models.split(","):
        if name not in KERAS_APPLICATIONS:
            parser.error(f"unknown model {name}; choose from {', '.join(KERAS_APPLICATIONS)}")
        print(f"{name}: exporting, freezing ...", flush=True)
        stock_dir = export_keras_application(name, workdir)
        frozen_dir = workdir / f"{name}_frozen"
        write_saved_model(freeze(stock_dir), frozen_dir, overwrite=True)
        stock, frozen = load_runner(stock_dir), load_runner(frozen_dir)
        equivalence = compare(stock, frozen, batches=1, batch_size=1)
        feeds = make_inputs(stock.signature, batch_size=1, seed=1)
        t_stock, t_frozen = stock.to_tensors(feeds), frozen.to_tensors(feeds)
        print(f"{name}: timing for at least {args.seconds:.0f}s ...", flush=True)
        samples = time_interleaved(
            {"stock": lambda s=stock, t=t_stock: s.call(t),
             "frozen": lambda f=frozen, t=t_frozen: f.call(t)},
            warmup=10, min_runs=50, min_seconds=args.seconds,
            progress=lambda n, s: print(f"  {n} rounds, {s:.0f}s", flush=True))
        p50_stock, p50_frozen = samples["stock"].p50, samples["frozen"].p50
        rows.append({
            "model": name, "batch": 1, "runs": len(samples["stock"].seconds),
            "stock_p50_ms": round(p50_stock * 1e3, 3),
            "frozen_p50_ms": round(p50_frozen * 1e3, 3),
            "speedup": round(p50_stock / p50_frozen, 3),
            "max_abs_diff": equivalence.max_abs_diff,
        })

    print(f"\n{'model':<12} {'runs':>5} {'stock p50':>10} {'frozen p50':>11} {'speedup':>8}"
          f" {'max|diff|':>10}")
    for r in rows:
        print(f"{r['model']:<12} {r['runs']:>5} {r['stock_p50_ms']:>8.2f}ms "
              f"{r['frozen_p50_ms']:>9.2f}ms {r['speedup']:>7.2f}x {r['max_abs_diff']:>10.2e}")
    print(f"\nresults: {write_result('freeze', {'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
