"""Input vs greedy vs relaxed substitution search: p50 latency in one process, search effort.

    .venv/bin/python benchmarks/search.py [--models InceptionBlock,WideBlock,ResNet50,InceptionV3]
        [--budget 20] [--time-budget 120] [--seconds 10] [--remeasure-top 3] [--workdir DIR]
        [--print-only]

Models:

- ``InceptionBlock``: a stem (3x3 conv, 256 filters, on 1x14x14x256) feeding parallel branches
  1x1 conv (8 filters) | 3x3 conv (8 filters) | 3x3 max pool, concatenated. Convs this narrow
  do not fill the SIMD lanes, so one 3x3 conv with 16 filters costs little more than one with
  8: merging the enlarged 1x1 with its 3x3 sibling can pay, and the stem makes the slower
  enlargement step a few percent of the whole (what ``alpha`` compares against), as inside a
  network.
- ``WideBlock``: the same shape of block with 64-filter branches on 1x28x28x64. Here one conv
  with 128 filters costs about what two with 64 do, so enlarging and merging does not pay
  (tests/test_search_relaxation.py measured the merged pair at 1.4-1.6x): the case where the
  relaxed search has nothing to find.
- ``ResNet50``, ``InceptionV3``: ``keras.applications`` with ``weights=None``, random BatchNorm
  statistics and no final softmax (see ``export_keras_application``).

Variants of each: ``input`` (the frozen graph), ``greedy`` (alpha 1), ``relaxed_1.05`` and
``relaxed_1.1``, each made by :func:`tfopt.optimizer.optimize.flow.search_candidate` with the op cost model
(one cache file in the workdir, shared by all searches of a run, so they see the same per-op
timings) and the library's end-to-end re-measurement of the best few graphs
(``--remeasure-top``). Every variant is written as a SavedModel and loaded with
:func:`tfopt.optimizer.runtime.load_runner`; all variants of one model are timed together in this
process, interleaved with rotating order (:func:`time_interleaved`), at batch 1. ``max|diff|``
is against the input's outputs on the timed batch. Search time includes the cost model's op
timings (cache misses), the one-pass cleanup before the search and the re-measurement;
``substitutions`` counts the search's steps, not the cleanup. A relaxed search runs greedy
first, continues from greedy's graph, and keeps greedy's graph unless its own is measured
faster with confidence
(:func:`tfopt.optimizer.search.remeasure.remeasure`), so its search time includes greedy's; ``vs greedy``
gives the p50 speedup over the greedy variant with its 95 % interval, and says when the two are
the same graph (then the figure is the noise of timing one graph twice).
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
from common import KERAS_APPLICATIONS, export_keras_application, work_directory, write_result

from tfopt.optimizer.errors import first_line

VARIANTS = {"greedy": ("greedy", 1.0), "relaxed_1.05": ("relaxed", 1.05),
            "relaxed_1.1": ("relaxed", 1.1)}
# name -> (input height/width, input channels, stem filters or 0, branch filters)
BLOCKS = {"InceptionBlock": (14, 256, 256, 8), "WideBlock": (28, 64, 64, 64)}
DEFAULT_MODELS = "InceptionBlock,WideBlock,ResNet50,InceptionV3"


def export_block(name: str, workdir: Path) -> Path:
    """The synthetic block as a Keras SavedModel (cached on disk)."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    import keras

    path = workdir / f"{name}_savedmodel"
    if (path / "saved_model.pb").is_file():
        return path
    size, channels, stem, filters = BLOCKS[name]
    keras.utils.set_random_seed(0)
    inputs = keras.Input((size, size, channels), name="image")
    x = keras.layers.Conv2D(stem, 3, padding="same", activation="relu", name="stem")(inputs)
    branches = [
        keras.layers.Conv2D(filters, 1, padding="same", activation="relu", name="b1x1")(x),
        keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name="b3x3")(x),
        keras.layers.MaxPooling2D(3, 1, padding="same", name="pool")(x),
    ]
    outputs = keras.layers.Concatenate(name="out")(branches)
    keras.Model(inputs, outputs).export(str(path), verbose=False)
    return path


def source_of(name: str, workdir: Path) -> Path:
    if name in BLOCKS:
        return export_block(name, workdir)
    return export_keras_application(name, workdir, random_batch_norm=True, logits=True)



def build_variants(name: str, workdir: Path, args) -> tuple[dict[str, Path], dict[str, dict]]:
    """Variant -> written SavedModel, and variant -> what its search did (or why it failed)."""
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.optimize.flow import search_candidate
    from tfopt.optimizer.verify.tolerance import Tolerance

    frozen = freeze(source_of(name, workdir))
    paths = {"input": write_saved_model(frozen, workdir / f"{name}_input", overwrite=True)}
    from tfopt.optimizer.search.hashing import canonical_hash

    info = {"input": {"nodes": len(frozen.graph_def.node),
                      "graph_hash": canonical_hash(frozen.graph_def)}}
    print(f"{name}: {len(frozen.graph_def.node)} nodes frozen", flush=True)
    for variant, (strategy, alpha) in VARIANTS.items():
        started = time.perf_counter()
        try:
            candidate = search_candidate(
                frozen, Tolerance(), workdir / "op_costs.json", strategy=strategy, alpha=alpha,
                budget=args.budget, time_budget=args.time_budget, cost="model",
                remeasure_top=args.remeasure_top)
        except Exception as exc:  # noqa: BLE001 - one failed search must not end the benchmark
            info[variant] = {"error": first_line(exc, with_type=True)}
            print(f"  {variant}: FAILED: {info[variant]['error']}", flush=True)
            continue
        seconds = time.perf_counter() - started
        search = candidate.search
        info[variant] = {
            "search_seconds": seconds, "stats": search["stats"], "returned": search["returned"],
            "input_cost": search["input_cost"], "cost": search["cost"],
            "substitutions": [s["substitution"] for s in search["trace"]],
            "measured": search["measured"], "nodes": len(candidate.model.graph_def.node),
            "graph_hash": canonical_hash(candidate.model.graph_def)}
        paths[variant] = write_saved_model(candidate.model, workdir / f"{name}_{variant}",
                                           overwrite=True)
        stats = search["stats"]
        print(f"  {variant}: {seconds:.1f}s, {stats['expansions']} expansions, "
              f"{stats['generated']} generated, {stats['kept']} kept (stopped by "
              f"{stats['stopped_by']}); returned {search['returned']}: "
              f"{', '.join(s['substitution'].split('(')[0] for s in search['trace']) or '-'}",
              flush=True)
    return paths, info


def max_abs_diff(a: dict, b: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64))))
               for k in a)


def time_model(name: str, paths: dict[str, Path], info: dict[str, dict], args) -> list[dict]:
    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.benchmark.stats import p50_ratio_interval
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.runtime import load_runner

    runners = {variant: load_runner(path) for variant, path in paths.items()}
    feeds = make_inputs(runners["input"].signature, batch_size=1, seed=1)
    tensors = {v: r.to_tensors(feeds) for v, r in runners.items()}
    outputs = {v: {k: t.numpy() for k, t in r.call(tensors[v]).items()}
               for v, r in runners.items()}
    print(f"{name}: timing {', '.join(runners)} interleaved for at least {args.seconds:.0f}s "
          f"/ {args.min_rounds} rounds ...", flush=True)
    samples = time_interleaved(
        {v: (lambda r=runner, t=tensors[v]: r.call(t)) for v, runner in runners.items()},
        warmup=3, min_runs=args.min_rounds, min_seconds=args.seconds, rotate_order=True)
    rows = []
    input_cost = next((i["input_cost"] for i in info.values() if "input_cost" in i), None)
    hashes = {v: i.get("graph_hash") for v, i in info.items()}
    for variant in ("input", *VARIANTS):
        row = {"model": name, "variant": variant, **info.get(variant, {})}
        model_cost = input_cost if variant == "input" else info.get(variant, {}).get("cost")
        if variant in samples:
            row.update(p50_ms=samples[variant].p50 * 1e3, model_cost=model_cost,
                       rounds=len(samples[variant].seconds),
                       max_abs_diff=max_abs_diff(outputs[variant], outputs["input"]),
                       same_graph_as=next((v for v in ("input", "greedy") if v != variant
                                           and hashes.get(v) == hashes.get(variant)), None))
            if "greedy" in samples and variant != "greedy":
                row["vs_greedy"] = p50_ratio_interval(
                    samples["greedy"].seconds, samples[variant].seconds).to_dict()
        rows.append(row)
    runners.clear()
    gc.collect()
    return rows


def print_table(rows: list[dict]) -> None:
    print("| model | variant | p50 ms | vs input | vs greedy [95% CI] | search s | expansions | "
          "generated / kept | returned | substitutions | max\\|diff\\| |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|")
    p50 = {(r["model"], r["variant"]): r.get("p50_ms") for r in rows}
    for r in rows:
        head = f"| {r['model']} | {r['variant']} |"
        if "error" in r or "p50_ms" not in r:
            print(f"{head} - | - | - | - | - | - | failed | {r.get('error', '')[:120]} | - |")
            continue
        base, greedy = p50[(r["model"], "input")], p50.get((r["model"], "greedy"))
        vs_greedy = "-"
        if "vs_greedy" in r and r["variant"] != "input":
            ratio = r["vs_greedy"]
            vs_greedy = (f"{1 / ratio['ratio']:.2f}x [{1 / ratio['high']:.2f}, "
                         f"{1 / ratio['low']:.2f}]")
        elif greedy and r["variant"] != "input":
            vs_greedy = f"{greedy / r['p50_ms']:.2f}x"
        if r.get("same_graph_as"):
            vs_greedy += f" (= {r['same_graph_as']}'s graph)"
        if r["variant"] == "input":
            print(f"{head} {r['p50_ms']:.3f} | 1.00x | - | - | - | - | - | - | "
                  f"{r['max_abs_diff']:.1e} |")
            continue
        stats = r["stats"]
        # The one-pass cleanup before every search (SEARCH_CLEANUP) is not a substitution.
        subs = [s for s in r["substitutions"] if not s.startswith("cleanup:")]
        names = {}
        for s in subs:
            names[s.split("(")[0]] = names.get(s.split("(")[0], 0) + 1
        summary = ", ".join(f"{k} x{v}" for k, v in names.items()) or "-"
        print(f"{head} {r['p50_ms']:.3f} | {base / r['p50_ms']:.2f}x | {vs_greedy} | "
              f"{r['search_seconds']:.1f} | {stats['expansions']} | "
              f"{stats['generated']} / {stats['kept']} | {r['returned']} | "
              f"{len(subs)}: {summary} | {r['max_abs_diff']:.1e} |")


def print_rank_correlation(rows: list[dict]) -> None:
    """How well the op cost model ranks the graphs it chose between, against measured p50."""
    from tfopt.optimizer.search.cost import rank_correlation

    usable = [r for r in rows if r.get("model_cost") is not None and "p50_ms" in r]
    for model in dict.fromkeys(r["model"] for r in usable):
        own = [r for r in usable if r["model"] == model]
        rho = rank_correlation([r["model_cost"] for r in own], [r["p50_ms"] for r in own])
        print(f"cost model vs measured p50, {model}: Spearman {rho:.2f} over {len(own)} graphs")
    if len(usable) > 2:
        rho = rank_correlation([r["model_cost"] for r in usable], [r["p50_ms"] for r in usable])
        print(f"cost model vs measured p50, all models: Spearman {rho:.2f} over "
              f"{len(usable)} graphs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help=f"comma-separated, from {', '.join([*BLOCKS, *KERAS_APPLICATIONS])}")
    parser.add_argument("--budget", type=int, default=20, help="expansions per search")
    parser.add_argument("--time-budget", type=float, default=120.0, dest="time_budget",
                        help="seconds per search")
    parser.add_argument("--remeasure-top", type=int, default=3, dest="remeasure_top",
                        help="graphs each search re-measures end to end (0: none)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="minimum timed seconds per model (all variants interleaved)")
    parser.add_argument("--min-rounds", type=int, default=20, dest="min_rounds")
    parser.add_argument("--result-name", default="search", dest="result_name",
                        help="results/<name>.json (default search)")
    parser.add_argument("--print-only", action="store_true", dest="print_only",
                        help="print the table of the saved results/<result-name>.json and exit")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the sources are cached, the op cost cache and variants kept")
    args = parser.parse_args()
    if args.print_only:
        import json

        from common import RESULTS_DIR

        rows = json.loads((RESULTS_DIR / f"{args.result_name}.json").read_text())["rows"]
        print_table(rows)
        print_rank_correlation(rows)
        return 0
    names = args.models.split(",")
    unknown = [n for n in names if n not in BLOCKS and n not in KERAS_APPLICATIONS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}")
    workdir = work_directory(args.workdir, "tfopt-bench-search-")

    from tfopt.optimizer.system.cpu_features import cpu_model
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    rows, target = [], None
    for name in names:
        started = time.perf_counter()
        try:
            paths, info = build_variants(name, workdir, args)
            rows.extend(time_model(name, paths, info, args))
        except Exception as exc:  # noqa: BLE001 - report the model as failed, go on
            rows.append({"model": name, "variant": "input", "error": first_line(exc, with_type=True)})
            print(f"{name}: FAILED: {first_line(exc, with_type=True)}", flush=True)
        print(f"{name}: done in {time.perf_counter() - started:.0f}s", flush=True)
        # Written after every model, so that a long run that breaks later keeps what it measured.
        target = write_result(args.result_name, {
            "tensorflow": tf.__version__, "cpu_model": cpu_model(), "budget": args.budget,
            "time_budget": args.time_budget, "remeasure_top": args.remeasure_top,
            "seconds": args.seconds, "rows": rows})

    print()
    print_table(rows)
    print()
    print_rank_correlation(rows)
    print(f"\nresults: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
