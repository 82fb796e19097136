"""Every candidate against the stock SavedModel, in one process: latency ratio, accuracy, size,
and what the gate chooses with LiteRT allowed and with SavedModels only.

    .venv/bin/python benchmarks/candidates.py [--models ResNet50,MobileNetV2,digits]
        [--seconds 10] [--min-runs 30] [--accuracy-budget 0.005] [--workdir DIR]
        [--print-only]

Per model, the library's own path (what ``tfopt optimize --targets savedmodel,litert`` runs):
the inference recipe's optimized fp32 SavedModel, then :func:`tfopt.optimizer.candidates.build.
derive_candidates` (bf16, XLA, LiteRT fp32 / fp16 / dynamic-range int8 / full int8), all timed
interleaved against the stock SavedModel at batch 1 by the gate's benchmark harness
(:func:`tfopt.optimizer.gate.selection.select_candidate`), with ``p50(candidate) / p50(stock)`` and its 95%
paired-bootstrap interval.

Accuracy: ``digits`` (the demo's CNN, trained here on scikit-learn's digits) is scored by real
top-1 on its held-out split, which also calibrates full int8 (100 rows drawn from it).
``ResNet50`` and ``MobileNetV2`` (``keras.applications``, ``weights=None``, random BatchNorm
statistics, logits out) have no labelled data here, so their accuracy is top-1 agreement with
the stock model on 256 generated inputs, and full int8 is calibrated on 100 generated inputs.
The gate's budget (``--accuracy-budget``, absolute) bounds the drop in top-1, or ``1 -
agreement`` for the others.

"chosen, litert allowed" is the gate's pick among all candidates (fastest that is faster with
confidence and inside the budget); "chosen, SavedModel only" is its pick among the SavedModel
candidates, what a TF Serving site gets.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))
from common import (
    add_result_arguments,
    export_keras_application,
    read_result,
    work_directory,
    write_result,
)

DEFAULT_MODELS = "ResNet50,MobileNetV2,digits"
CALIBRATION_ROWS = 100


def source_of(name: str, workdir: Path):
    """(stock SavedModel, eval data path or None)."""
    if name == "digits":
        from tfopt.components.demo.digits import train_digits_model

        if not (workdir / "digits_savedmodel" / "saved_model.pb").is_file():
            train_digits_model(workdir, overwrite=True)
        return workdir / "digits_savedmodel", workdir / "digits_eval.npz"
    return export_keras_application(name, workdir, random_batch_norm=True, logits=True), None


def build_candidates(name: str, workdir: Path):
    """(stock SavedModel, eval data or None, [optimized, derived...], skipped): the library's own
    path, as ``tfopt optimize --targets savedmodel,litert`` builds them. Full int8 calibrates on
    the eval data's inputs, else on inputs generated from the signature (tagged synthetic)."""
    from tfopt.optimizer.candidates.build import (
        CandidateSettings,
        derive_candidates,
        savedmodel_load_instructions,
    )
    from tfopt.optimizer.candidates.candidate import Candidate
    from tfopt.optimizer.inputs.calibration import choose_calibration
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.optimize.flow import optimize, write_optimized
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE

    stock, eval_data = source_of(name, workdir)
    started = time.perf_counter()
    optimized = optimize(stock, INFERENCE_RECIPE)
    optimized_dir = write_optimized(optimized, workdir / f"{name}_optimized", overwrite=True)
    candidates = [Candidate("optimized", "savedmodel", "fp32", "savedmodel", "tensorflow",
                            str(optimized_dir), savedmodel_load_instructions("serving_default"))]
    made, skipped = derive_candidates(
        stock, optimized.candidate.model, workdir / f"{name}_candidates",
        CandidateSettings(targets=("savedmodel", "litert")),
        calibration=choose_calibration(get_signature(stock), CALIBRATION_ROWS,
                                       eval_data=eval_data))
    print(f"{name}: {len(made) + 1} candidates built in {time.perf_counter() - started:.0f}s"
          + (f"; skipped {', '.join(f'{s.label} ({s.reason})' for s in skipped)}"
             if skipped else ""), flush=True)
    return stock, eval_data, candidates + made, skipped


def measure_model(name: str, workdir: Path, args, runtime) -> dict:
    from tfopt.optimizer.benchmark.harness import BenchmarkConfig
    from tfopt.optimizer.gate.selection import select_candidate
    from tfopt.optimizer.gate.verdict import GateConfig

    started = time.perf_counter()
    stock, eval_data, candidates, skipped = build_candidates(name, workdir)
    built_seconds = time.perf_counter() - started
    selection = select_candidate(
        stock, candidates, GateConfig(max_accuracy_drop_abs=args.accuracy_budget),
        BenchmarkConfig(batch_sizes=(1,), warmup=5, min_runs=args.min_runs,
                        min_seconds=args.seconds),
        skipped=skipped, eval_data=eval_data, runtime=runtime,
        progress=lambda message: print(f"  {message}", flush=True))
    rows = selection.rows()
    passing = [r for r in rows if r["verdict"] in ("chosen", "passed")]
    savedmodel_only = max((r for r in passing if r["format"] == "savedmodel"),
                          key=lambda r: r["speedup"], default=None)
    base = selection.result.baseline
    return {
        "stock_top1_classes": None if eval_data is not None else _distinct_top1(stock),
        "model": name, "build_seconds": built_seconds,
        "stock_p50_ms": base.latency[1].p50 * 1e3, "stock_size_bytes": base.size_bytes,
        "stock_accuracy": base.quality.value if base.quality else None,
        "rounds": selection.decision.intervals[rows[0]["label"]][1].rounds if rows else 0,
        "chosen": selection.chosen.label if selection.chosen else None,
        "chosen_savedmodel_only": savedmodel_only["label"] if savedmodel_only else None,
        "rows": rows,
    }


def _distinct_top1(stock: Path) -> int:
    """How many classes the stock model's top-1 takes over 256 generated inputs: with random
    weights it can be one, and then top-1 agreement says nothing; max rel diff still does."""
    import numpy as np

    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.runtime import load_runner

    runner = load_runner(stock)
    classes = set()
    for seed in range(4):
        outputs = runner(make_inputs(runner.signature, batch_size=64, seed=seed))
        classes.update(np.asarray(next(iter(outputs.values()))).argmax(axis=-1).tolist())
    return len(classes)


def print_tables(models: list[dict], budget: float) -> None:
    print("| model | candidate | format | p50 ms | p50 / stock [95% CI] | speedup | accuracy | "
          "drop | max rel diff | size | verdict |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---|")
    for m in models:
        accuracy = "-" if m["stock_accuracy"] is None else f"{m['stock_accuracy']:.4f}"
        print(f"| {m['model']} | stock | savedmodel | {m['stock_p50_ms']:.3f} | 1 | 1.00x | "
              f"{accuracy} | - | - | {m['stock_size_bytes'] / 2**20:.2f} MiB | baseline |")
        for r in m["rows"]:
            if r["verdict"] == "skipped":
                print(f"| {m['model']} | {r['label']} | - | - | - | - | - | - | - | - | skipped: "
                      f"{r['reasons'][0][:80]} |")
                continue
            low, high = r["ratio_interval"]
            kind = "" if r["accuracy_kind"] == "top1" else " agr"
            reasons = f" ({'; '.join(r['reasons'])})" if r["reasons"] else ""
            rel = "-" if r.get("max_rel_diff") is None else f"{r['max_rel_diff']:.1e}"
            print(f"| {m['model']} | {r['label']} | {r['format']} | {r['p50_seconds'] * 1e3:.3f} "
                  f"| {r['ratio_to_baseline']:.3f} [{low:.3f}, {high:.3f}] | "
                  f"{r['speedup']:.2f}x | {r['accuracy']:.4f}{kind} | "
                  f"{r['accuracy_drop'] * 100:+.2f} pt | {rel} | "
                  f"{r['size_bytes'] / 2**20:.2f} MiB | "
                  f"{r['verdict']}{reasons} |")
    print()
    print(f"accuracy budget {budget} (absolute); 'agr' = top-1 agreement with the stock model")
    for m in models:
        speedups = {r["label"]: r.get("speedup") for r in m["rows"]}
        chosen, only = m["chosen"], m["chosen_savedmodel_only"]
        print(f"{m['model']}: chosen, litert allowed: "
              f"{chosen or 'none'}{f' ({speedups[chosen]:.2f}x)' if chosen else ''}; "
              f"chosen, SavedModel only: "
              f"{only or 'none'}{f' ({speedups[only]:.2f}x)' if only else ''}; "
              f"{m['rounds']} rounds"
              + (f"; stock top-1 takes {m['stock_top1_classes']} class(es) over 256 generated "
                 f"inputs" if m.get("stock_top1_classes") is not None else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--seconds", type=float, default=10.0, help="minimum timed seconds")
    parser.add_argument("--min-runs", type=int, default=30, dest="min_runs")
    parser.add_argument("--accuracy-budget", type=float, default=0.005, dest="accuracy_budget")
    add_result_arguments(parser, "candidates")
    args = parser.parse_args()
    if args.print_only:
        saved = read_result(args.result_name)
        print_tables(saved["models"], saved["accuracy_budget"])
        return 0

    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    runtime = apply_runtime_settings(default_runtime_settings())  # before TensorFlow starts
    workdir = work_directory(args.workdir, "tfopt-bench-candidates-")
    models, target = [], None
    for name in args.models.split(","):
        started = time.perf_counter()
        models.append(measure_model(name, workdir, args, runtime))
        print(f"{name}: done in {time.perf_counter() - started:.0f}s", flush=True)
        target = write_result(args.result_name, {"accuracy_budget": args.accuracy_budget,
                                                 "seconds": args.seconds, "models": models})
    print()
    print_tables(models, args.accuracy_budget)
    print(f"\nresults: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
