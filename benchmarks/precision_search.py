"""Mixed precision searched by measured latency, against every uniform candidate, on models
uniform int8 breaks; and the digits CNN, where uniform int8 passes and the search stays off.

    .venv/bin/python benchmarks/precision_search.py [--seconds 20] [--threads 1] [--budget 0.01]
        [--models digits_separable,digits_inverted,breast_cancer,wine] [--no-digits]
        [--workdir DIR] [--result-name NAME] [--print-only]

Models (tests/precision_models.py, trained here on scikit-learn's bundled data in seconds; the
module says why full int8 breaks on each): two digits convnets (MobileNetV1- and V2-style)
whose images are standardized per pixel inside the model, where the search pays; two tables
(breast cancer, wine) whose raw features are normalized inside an MLP, where dynamic-range int8
keeps up.

For each model, in one process: the stock SavedModel call, every uniform candidate the four
targets build (SavedModel: the library's float rewrite ``optimized``, ``bf16``, ``xla``; LiteRT:
fp32, fp16, dynamic-range int8, full int8; ONNX Runtime: fp32, optimized, dynamic int8, static
int8; OpenVINO: fp32, bf16, int8), and ``onnx_mixed_int8``, ``litert_mixed_int8`` and
``openvino_mixed_int8`` as the
greedy search (INC/NNCF fallback) and the relaxed search chose them. Accuracy on the held-out
quarter; latency p50 at batch 1, all of a model's candidates timed interleaved in blocks of 10
calls (:func:`tfopt.optimizer.benchmark.interleaved.time_interleaved`, the order rotating each
round), ``--threads`` intra-op threads for the runtimes that take it (TensorFlow sets its
threads once per process: the SavedModels run on its defaults). Printed per model: each one's
accuracy, p50 ratio to stock, and the searched candidates' p50 against the best uniform
candidate inside the budget (paired block-bootstrap 95% interval), relaxed against greedy, and
the search's time (table, search, building and measuring its proposals). The digits CNN
(components/demo/digits.py): the ``auto`` rule measures uniform int8's error and keeps the search
off; the time that took is printed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT.parent / "tests"))

from common import add_result_arguments, read_result, work_directory, write_result

UNIFORM = ("optimized", "bf16", "xla", "litert_fp32", "litert_fp16", "litert_dynamic_int8",
           "litert_full_int8", "onnx_fp32", "onnx_optimized", "onnx_dynamic_int8",
           "onnx_static_int8", "openvino_fp32", "openvino_bf16", "openvino_int8")
TARGETS = ("savedmodel", "litert", "onnx", "openvino")
# TensorFlow sets its threads once per process: these run on its defaults
SAVEDMODEL_LABELS = ("stock", "optimized", "bf16", "xla")
SEARCHES = ("greedy", "relaxed")
MIXED = {"onnx": "onnx_mixed_int8", "litert": "litert_mixed_int8",
         "openvino": "openvino_mixed_int8"}


def build_all(name: str, workdir: Path, budget: float, threads: int) -> tuple[dict, dict, object]:
    """(label -> candidate path, label -> search outcome dict, the trained model)."""
    from precision_models import train_model

    from tfopt.optimizer.candidates.build import CandidateSettings, build_candidates
    from tfopt.optimizer.candidates.onnx.convert import OnnxExport
    from tfopt.optimizer.inputs.calibration import choose_calibration
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.optimize.flow import optimize, write_optimized
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE
    from tfopt.optimizer.search.precision.candidates import mixed_candidate
    from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings
    from tfopt.optimizer.verify.evaluation import load_labelled_data

    model = train_model(name, workdir)
    signature = get_signature(model.saved_model, "serving_default")
    calibration = choose_calibration(signature, 100,
                                     calibration_data=str(model.calibration_data))
    eval_data = load_labelled_data(model.eval_data, signature, "top1")
    # the library's float rewrite (the "optimized" candidate), from which bf16 and xla derive
    optimized = optimize(model.saved_model, INFERENCE_RECIPE)
    optimized_dir = write_optimized(optimized, workdir / f"{name}_optimized", overwrite=True)
    settings = CandidateSettings(targets=TARGETS)
    made, skipped = build_candidates(model.saved_model, optimized.candidate.model,
                                     workdir / f"{name}_candidates", settings, UNIFORM,
                                     signature="serving_default", calibration=calibration,
                                     source_digest=None)
    paths = {"stock": str(model.saved_model), "optimized": str(optimized_dir)}
    paths.update({c.label: c.path for c in made})
    for s in skipped:
        print(f"  {name}: {s.label} skipped: {s.reason}")
    searches = {}
    export = OnnxExport(model.saved_model)
    for target, mixed in MIXED.items():
        for strategy in SEARCHES:
            started = time.perf_counter()
            outcome = mixed_candidate(
                model.saved_model, workdir / f"{name}_{target}_{strategy}",
                PrecisionSearchSettings(mode=strategy), budget, signature="serving_default",
                calibration=calibration, eval_data=eval_data,
                export=export if target == "onnx" else None,
                cost_cache=workdir / "precision_costs.json", target=target)
            wall = time.perf_counter() - started
            label = f"{mixed} ({strategy})"
            if outcome.candidate is not None:
                paths[label] = outcome.candidate.path
            searches[label] = {**outcome.to_dict(), "wall_seconds": wall}
    return paths, searches, (model, eval_data)


def measure(paths: dict, eval_data, seconds: float, threads: int) -> dict:
    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.benchmark.stats import p50_ratio_interval
    from tfopt.optimizer.runtime import load_runner
    from tfopt.optimizer.verify.evaluation import evaluate

    runners = {label: load_runner(path, "serving_default",
                                  num_threads=None if label in SAVEDMODEL_LABELS else threads)
               for label, path in paths.items()}
    accuracy = {label: float(evaluate(r, eval_data, "top1", batch_size=1))
                for label, r in runners.items()}
    key = runners["stock"].signature.inputs[0].key
    x1 = eval_data.x[:1]
    calls = {label: r.bind(r.to_tensors({key: x1})) for label, r in runners.items()}
    samples = time_interleaved(calls, warmup=20, min_runs=30, min_seconds=seconds,
                               rotate_order=True, block_size=10)
    figures = {label: s.round_figures for label, s in samples.items()}
    rows = {}
    for label in paths:
        interval = p50_ratio_interval(figures[label], figures["stock"])
        rows[label] = {"accuracy": accuracy[label], "p50_seconds": samples[label].p50,
                       "speedup_vs_stock": interval.ratio,
                       "speedup_interval": [interval.low, interval.high]}
    for r in runners.values():
        r.close()
    return rows, figures


def compare(rows: dict, figures: dict, budget: float) -> dict:
    from tfopt.optimizer.benchmark.stats import p50_ratio_interval

    stock = rows["stock"]["accuracy"]
    inside = {label: row for label, row in rows.items()
              if label in UNIFORM and stock - row["accuracy"] <= budget}
    best = max(inside, key=lambda label: rows[label]["speedup_vs_stock"]) if inside else None
    out = {"best_uniform_inside_budget": best}
    for mixed in MIXED.values():
        for strategy in SEARCHES:
            label = f"{mixed} ({strategy})"
            if label not in rows:
                continue
            row = rows[label]
            out[label] = {"inside_budget": stock - row["accuracy"] <= budget}
            if best is not None:
                interval = p50_ratio_interval(figures[label], figures[best])
                out[label]["speedup_vs_best_uniform"] = [interval.ratio, interval.low,
                                                         interval.high]
        labels = [f"{mixed} ({s})" for s in SEARCHES]
        if all(label in rows for label in labels):
            interval = p50_ratio_interval(figures[labels[1]], figures[labels[0]])
            out[f"{mixed}: relaxed_vs_greedy"] = [interval.ratio, interval.low, interval.high]
    return out


def digits_auto(workdir: Path, budget: float) -> dict:
    """The auto rule on the digits CNN: uniform int8 measured, the search left off."""
    from tfopt.components.demo.digits import train_digits_model
    from tfopt.optimizer.inputs.calibration import choose_calibration
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.search.precision.candidates import mixed_candidate
    from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings
    from tfopt.optimizer.verify.evaluation import load_labelled_data

    digits = train_digits_model(workdir / "digits", overwrite=True)
    signature = get_signature(digits.saved_model, "serving_default")
    eval_data = load_labelled_data(digits.eval_data, signature, "top1")
    calibration = choose_calibration(signature, 100, eval_data=str(digits.eval_data))
    started = time.perf_counter()
    outcome = mixed_candidate(digits.saved_model, workdir / "digits_search",
                                   PrecisionSearchSettings(), budget,
                                   signature="serving_default", calibration=calibration,
                                   eval_data=eval_data)
    return {"strategy": outcome.strategy, "reason": outcome.reason,
            "uniform_int8_error": outcome.uniform_int8_error,
            "seconds": time.perf_counter() - started}


def print_result(result: dict) -> None:
    print(f"cpu: {result.get('cpu')}; threads {result['threads']}; budget {result['budget']}")
    for name, model in result["models"].items():
        print(f"\n{name}: float test accuracy {model['float_accuracy']:.4f}")
        print(f"  {'candidate':<28} {'accuracy':>8} {'x stock':>8}  95% interval")
        for label, row in sorted(model["rows"].items(),
                                 key=lambda kv: -kv[1]["speedup_vs_stock"]):
            low, high = row["speedup_interval"]
            print(f"  {label:<28} {row['accuracy']:8.4f} {row['speedup_vs_stock']:7.2f}x "
                  f" [{low:.2f}, {high:.2f}]")
        comparison = model["comparison"]
        print(f"  best uniform inside the budget: {comparison['best_uniform_inside_budget']}")
        for label, search in model["searches"].items():
            c = comparison.get(label, {})
            vs = c.get("speedup_vs_best_uniform")
            print(f"  {label}: float layers {search['float_layers']}; inside budget "
                  f"{c.get('inside_budget')}; vs best uniform "
                  f"{f'{vs[0]:.2f}x [{vs[1]:.2f}, {vs[2]:.2f}]' if vs else '-'}; search "
                  f"{search['wall_seconds']:.1f}s (table {search['table_seconds']:.1f}s)")
            for tried in (search["result"] or {}).get("tried", []):
                short = [n.split(";")[0].split("/")[-2] if "/" in n else n
                         for n in tried["float_layers"]]
                print(f"      tried float {short}: "
                      f"predicted {tried['predicted_seconds'] * 1e6:.1f} us / error "
                      f"{tried['predicted_error']:.4f}; measured "
                      f"{tried['measured_seconds'] * 1e6:.1f} us / error "
                      f"{tried['measured_error']:.4f}")
        for mixed in MIXED.values():
            if (r := comparison.get(f"{mixed}: relaxed_vs_greedy")) is not None:
                print(f"  {mixed}: relaxed vs greedy {r[0]:.3f}x [{r[1]:.3f}, {r[2]:.3f}]")
    digits = result.get("digits")
    if digits:
        print(f"\ndigits CNN (auto): search {digits['strategy']} ({digits['reason']}); "
              f"decided in {digits['seconds']:.1f}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=0.01)
    parser.add_argument("--models",
                        default="digits_separable,digits_inverted,breast_cancer,wine")
    parser.add_argument("--no-digits", action="store_true", dest="no_digits")
    add_result_arguments(parser, "precision_search")
    args = parser.parse_args()
    if args.print_only:
        print_result(read_result(args.result_name))
        return 0
    logging.basicConfig(level=logging.WARNING)
    from tfopt.optimizer.system.cpu_features import cpu_model

    workdir = work_directory(args.workdir, "tfopt-precision-bench-")
    result = {"cpu": cpu_model(), "threads": args.threads, "budget": args.budget,
              "seconds": args.seconds, "models": {}}
    for name in args.models.split(","):
        paths, searches, (model, eval_data) = build_all(name, workdir, args.budget,
                                                        args.threads)
        rows, figures = measure(paths, eval_data, args.seconds, args.threads)
        result["models"][name] = {"float_accuracy": model.test_accuracy, "rows": rows,
                                  "searches": searches,
                                  "comparison": compare(rows, figures, args.budget)}
    if not args.no_digits:
        result["digits"] = digits_auto(workdir, args.budget)
    print(f"wrote {write_result(args.result_name, result)}")
    print_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
