"""p50 latency of the stock SavedModel vs frozen, frozen + GTT recipe, frozen + Grappler; one process.

    .venv/bin/python benchmarks/transforms.py [--models ResNet50,MobileNetV2,InceptionV3]
        [--batch-sizes 1,32] [--seconds 30] [--min-rounds 10] [--workdir DIR]

Variants of each ``keras.applications`` model (``weights=None`` with random BatchNorm statistics
and no final softmax, so that max|diff| measures something; see ``export_keras_application``),
exported with ``model.export``:

- ``stock``: the exported SavedModel;
- ``frozen``: :func:`tfopt.optimizer.model.freeze.freeze`, written back as a SavedModel;
- ``gtt``: frozen + :data:`tfopt.optimizer.optimize.recipe.INFERENCE_RECIPE` by this package's transforms;
- ``grappler``: frozen + the ``grappler`` transform with its default float32 passes (incl. the
  remapper's Conv2D + BiasAdd + activation fusions);
- ``grappler_bf16``: frozen + ``auto_mixed_precision_onednn_bfloat16`` with the default passes
  minus ``remap`` (bfloat16 + remap makes ``_Fused*`` nodes an artifact cannot load; TF fuses
  again in memory on load). Refused by the transform on a CPU without native bfloat16.

Every variant is written as a SavedModel and loaded with :func:`tfopt.optimizer.runtime.load_runner`
(``tf.saved_model.load`` + its serving signature), so what is timed is what gets served. All
variants of one model at one batch size are timed together in this process with
:func:`tfopt.optimizer.benchmark.interleaved.time_interleaved` (rotating order), and each speedup is
``p50(stock) / p50(variant)`` from those paired rounds, with a 95% paired block-bootstrap
interval. ``max|diff|`` is against the stock model's outputs on the timed batch. A variant that
fails to build or load is listed with its reason.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))
from common import (
    export_keras_application,
    model_names,
    work_directory,
    write_result,
)

from tfopt.optimizer.errors import first_line

VARIANTS = ("stock", "frozen", "gtt", "grappler", "grappler_bf16")


def variant_errors() -> tuple[type[BaseException], ...]:
    """What building, loading or calling one variant may raise; the others still get timed."""
    from tfopt.optimizer.errors import TfoptError
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    return (TfoptError, tf.errors.OpError, ValueError, RuntimeError, OSError)



def bf16_optimizers() -> list[str]:
    from tfopt.optimizer.candidates.bf16 import BF16_PASSES

    return list(BF16_PASSES)


def build_variants(name: str, workdir: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Variant -> SavedModel directory, and variant -> why it could not be built."""
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.optimize.flow import apply_recipe
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE, Recipe
    from tfopt.optimizer.transforms.pipeline import run_transforms
    from tfopt.optimizer.transforms.registry import make_transform

    stock_dir = export_keras_application(name, workdir, random_batch_norm=True, logits=True)
    frozen = freeze(stock_dir)
    makers = {
        "frozen": lambda: frozen,
        "gtt": lambda: apply_recipe(frozen, Recipe.from_string(INFERENCE_RECIPE)).model,
        "grappler": lambda: run_transforms(frozen, [make_transform("grappler")])[0],
        "grappler_bf16": lambda: run_transforms(
            frozen, [make_transform("grappler", optimizers=bf16_optimizers())])[0],
    }
    paths, failures = {"stock": stock_dir}, {}
    for variant, make in makers.items():
        started = time.perf_counter()
        try:
            model = make()
            paths[variant] = write_saved_model(model, workdir / f"{name}_{variant}",
                                               overwrite=True)
        except variant_errors() as exc:
            failures[variant] = first_line(exc, with_type=True)
            print(f"  {variant}: FAILED: {failures[variant]}", flush=True)
            continue
        print(f"  {variant}: built in {time.perf_counter() - started:.1f}s, "
              f"{len(model.graph_def.node)} nodes", flush=True)
    return paths, failures


def max_abs_diff(a: dict, b: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64))))
               for k in a)


def time_model(name: str, paths: dict[str, Path], failures: dict[str, str],
               batch_sizes: list[int], args, variants: tuple[str, ...] = VARIANTS,
               make_feeds=None) -> list[dict]:
    """Rows of p50 and speedup vs ``stock`` for ``variants`` of one model, per batch size.
    ``make_feeds(signature, batch)`` gives the inputs (default: generated from the signature);
    a path ending in ``.tflite`` runs in LiteRT."""
    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.benchmark.stats import p50_ratio_interval
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.runtime import load_runner

    runners = {}
    make_feeds = make_feeds or (lambda signature, batch: make_inputs(signature, batch, seed=1))
    for variant, path in paths.items():
        try:
            runners[variant] = load_runner(path)
        except variant_errors() as exc:
            failures[variant] = f"does not load: {first_line(exc, with_type=True)}"
    rows = []
    for batch in batch_sizes:
        feeds = make_feeds(runners["stock"].signature, batch)
        tensors, outputs = {}, {}
        for variant, runner in list(runners.items()):
            try:
                tensors[variant] = runner.to_tensors(feeds)
                outputs[variant] = runner.outputs(runner.call(tensors[variant]))
            except variant_errors() as exc:
                failures[variant] = f"does not run: {first_line(exc, with_type=True)}"
                del runners[variant]
        print(f"{name} batch {batch}: timing {', '.join(runners)} for at least "
              f"{args.seconds:.0f}s / {args.min_rounds} rounds ...", flush=True)
        samples = time_interleaved(
            {v: (lambda r=runner, t=tensors[v]: r.call(t)) for v, runner in runners.items()},
            warmup=args.warmup, min_runs=args.min_rounds, min_seconds=args.seconds,
            rotate_order=True, progress_every=30.0,
            progress=lambda n, s: print(f"  {n} rounds, {s:.0f}s", flush=True))
        stock = samples["stock"]
        for variant in variants:
            row = {"model": name, "batch": batch, "variant": variant}
            if variant not in samples:
                row["error"] = failures.get(variant, "not built")
                rows.append(row)
                continue
            row.update(p50_ms=samples[variant].p50 * 1e3, rounds=len(samples[variant].seconds),
                       max_abs_diff=max_abs_diff(outputs[variant], outputs["stock"]))
            if variant != "stock":
                interval = p50_ratio_interval(stock.seconds, samples[variant].seconds)
                row.update(speedup=interval.speedup, speedup_low=1 / interval.high,
                           speedup_high=1 / interval.low)
            else:
                row.update(speedup=1.0)
            rows.append(row)
    runners.clear()
    gc.collect()
    return rows


def print_table(rows: list[dict]) -> None:
    print("| model | batch | variant | p50 ms | speedup vs stock (95% CI) | max\\|diff\\| |")
    print("|---|---:|---|---:|---|---:|")
    for r in rows:
        head = f"| {r['model']} | {r['batch']} | {r['variant']} |"
        if "error" in r:
            print(f"{head} - | failed: {r['error'][:160]} | - |")
            continue
        ci = (f" ({r['speedup_low']:.2f}-{r['speedup_high']:.2f})"
              if "speedup_low" in r else "")
        print(f"{head} {r['p50_ms']:.2f} | {r['speedup']:.2f}x{ci} | {r['max_abs_diff']:.2e} |")


def print_results(rows: list[dict], target: Path) -> None:
    print()
    print_table(rows)
    print(f"\nresults: {target}")


def write_rows(name: str, rows: list[dict], **fields) -> Path:
    """``benchmarks/results/<name>.json``: this machine and TF, ``fields``, and the rows."""
    from tfopt.optimizer.system.cpu_features import cpu_model, isa_support
    from tfopt.optimizer.tf_runtime import import_tensorflow

    return write_result(name, {"tensorflow": import_tensorflow().__version__,
                               "cpu_model": cpu_model(), "isa": isa_support(), **fields,
                               "rows": rows})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="ResNet50,MobileNetV2,InceptionV3")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="minimum timed seconds per model and batch size (all variants)")
    parser.add_argument("--min-rounds", type=int, default=10,
                        help="minimum rounds (one call of every variant) per model and batch")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls per variant")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the stock SavedModels are cached and variants written")
    args = parser.parse_args()
    names = model_names(parser, args.models)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    workdir = work_directory(args.workdir, "tfopt-bench-transforms-")

    rows = []
    for name in names:
        print(f"{name}: exporting, freezing, building variants ...", flush=True)
        paths, failures = build_variants(name, workdir)
        rows.extend(time_model(name, paths, failures, batch_sizes, args))
        # Written after every model, so that a long run that breaks later keeps what it measured.
        target = write_rows("transforms", rows, seconds=args.seconds,
                            min_rounds=args.min_rounds)

    print_results(rows, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
