"""p50 latency of a string-token classifier: stock SavedModel vs frozen vs optimized vs LiteRT.

    .venv/bin/python benchmarks/string_lookup.py [--batch-sizes 1,32] [--seconds 20]
        [--vocabulary 10000] [--length 16] [--workdir DIR] [--bindings]

The model is the one issue 12 reported: string tokens -> Keras ``StringLookup`` (a vocabulary
of ``--vocabulary`` - 1 tokens and the out-of-vocabulary index) -> ``Embedding(vocabulary x
64)`` -> ``GlobalAveragePooling1D`` -> ``Dense(10)``, random weights, exported with
``model.export``. Variants:

- ``stock``: the exported SavedModel (its table is a ``HashTableV2`` behind a function call);
- ``frozen``: :func:`tfopt.optimizer.model.freeze.freeze`, the table folded into constants
  (:mod:`tfopt.optimizer.graph.lookup_tables`) and, as the lookup only indexes the embedding, into one
  gather of the embedding's rows (:mod:`tfopt.optimizer.graph.lookup_gathers`), written back as a
  SavedModel;
- ``optimized``: frozen + :data:`tfopt.optimizer.optimize.recipe.INFERENCE_RECIPE`;
- ``table_kept``: what folding is weighed against: the frozen graph with its table kept as a
  ``HashTableV2`` filled from constants (the SavedModel the LiteRT converter reads,
  :mod:`tfopt.optimizer.candidates.litert.constant_tables`), run by TensorFlow;
- ``litert_fp32``: the LiteRT fp32 candidate (its table as LiteRT's hash-table builtins), run by
  ai-edge-litert with XNNPACK on every CPU this process may use, and ``litert_fp32_1t`` on one.

Inputs are tokens drawn from the model's own vocabulary with a quarter out of it
(:func:`tfopt.optimizer.inputs.generated.make_inputs`). All variants of one batch size are timed interleaved in
this one process (:func:`benchmarks.transforms.time_model`, which calls each model's
``ModelRunner.call``: a TensorFlow signature by keyword, as a Python user calls it, where the
gate's benchmark and ``benchmarks/families.py`` time the bound call); each speedup is ``p50(stock) /
p50(variant)`` with a 95% paired block-bootstrap interval, and ``max|diff|`` is against the
stock model's outputs on the timed batch.

``--bindings`` times instead ``stock`` and ``optimized`` at batch 1 through each way the runner
has called a SavedModel's signature with flat inputs, in one process, blocks of 10 calls
interleaved, the order rotating each round: ``_call_flat``, the loaded
``ConcreteFunction._call_flat(flat, captured)`` (until round 22); ``call_preflattened``,
``AtomicFunction.call_preflattened`` on the runtime's function (round 23's
:class:`tfopt.optimizer.runtime.tensorflow.SignatureFunction`); ``bound``, what the runner binds now
(:meth:`SignatureFunction.bound`: the same eager execution without ``call_flat``'s Python);
and ``floor``, an identity function on the same input through the same ``bound``: what a call
costs whatever the model. Each row's ratio is ``p50(stock) / p50(optimized)`` through that
binding, with its 95% paired block-bootstrap interval.

Findings, 2026-11-25, 2 CPUs shared (load 5-9), intra-op 2 / inter-op 1 as the benchmarks run,
the r23 families artifacts (``work/families_r23/string``: stock and the r23 optimized): through
``_call_flat`` stock 124 us, optimized 82 us (1.52x, the r23 figure); through
``call_preflattened`` 90 and 70 us (1.28x). The stock call lost 34 us and the optimized one 12:
the loaded stock signature captures its table and variables (5 resource inputs), and
``saved_model/load.py``'s ``_call_flat`` wrapper walks them in Python on every call (6 of
``getattr`` and ``Tensor.__getattr__`` per capture under cProfile), which the frozen candidate,
capturing nothing, never paid. So the r23 1.51x measured the old binding's Python as much as the
graphs; the r23 candidate did not get slower, the stock's call got fair. What remains of the
call: ``call_flat``'s own Python (~25 us: three context managers, attribute building, output
handle data), then the eager function execution (~21 us for an identity function, run on the
inter-op thread), then the graph's ops (stock ~30 us, the r23 candidate ~15 us: StringToHash,
Reshape, LowerBound, Shape, Reshape, Minimum, two GatherV2, Equal, SelectV2, Mean, _MklMatMul,
BiasAdd). No table is created or initialized per call in either (the candidate has none; the
stock's is a captured, initialized resource); Grappler runs once, at instantiation, for both;
``release_load_copies`` does not apply to the stock (it captures its table), and changes
nothing per call for the candidate (same function, same kernels).

The same command on round 24's artifacts (``work/families_r24/string``: ``bound`` as the
runner binds now, ``fold_embedding_projections``, the search without ``Minimum`` and
``Shape``), 04:53, load 10.9: floor 26 us; ``_call_flat`` 134 / 82 us (1.61x),
``call_preflattened`` 95 / 67 us (1.40x), ``bound`` 63 / 42 us (1.50x [1.50, 1.51]); the r23
candidate through ``bound``: 1.34x. What is left is the executor's cost per op: the optimized
graph runs StringToHashBucketFast, Reshape, LowerBound, Reshape, two GatherV2, Equal, SelectV2
and Mean (and eight Consts), where the stock's table is one ``LookupTableFindV2``. The LiteRT
converter's source model, the table kept as a ``HashTableV2`` filled from constants and the
index map folded into it (:mod:`tfopt.optimizer.candidates.litert.constant_tables`: find, gather,
Mean, MatMul, BiasAdd), called through the same binding, was 1.70x the stock call where the
optimized graph was 1.53x (one process, load 11).

``--bindings`` also prints the ceiling: ``p50(stock) / p50(floor)``, what a candidate whose graph
cost nothing would gain through ``bound``. ``--intra-op-threads`` and ``--inter-op-threads`` set
TensorFlow's pools for the run (default: the CPUs and one, as ``families.py`` times). On
``families.py``'s string artifacts of round 26 (``--stock`` and ``--optimized``), 2026-11-28
11:57-11:59, quiet (load 0.5-1.1), 20 s each:

| intra / inter | floor us | stock us | optimized us | ceiling | stock / optimized |
|---|---:|---:|---:|---:|---:|
| 2 / 1 | 57.8 | 68.4 | 63.0 | 1.19x [1.19, 1.19] | 1.09x |
| 2 / 2 | 45.0 | 60.3 | 53.7 | 1.26x [1.22, 1.33] | 1.11x |
| 1 / 2 | 38.5 | 54.7 | 50.6 | 1.37x [1.28, 1.46] | 1.15x |
| 1 / 1 | 70.8 | 91.8 | 81.5 | 1.26x [1.23, 1.29] | 1.11x |

So on a quiet machine no SavedModel of this model reaches 1.5x its stock call through this
call, at any of these settings: the stock graph's ops cost 11-21 us above a call that does
nothing, and the call itself is 38-71 us. That call is mostly thread hand-offs. The eager runtime
runs the function on the inter-op pool and the caller waits for it, so every call pays two
wake-ups when the pool's one thread sleeps (inter 1). With two threads, one of them is often
still spinning. Then an identity call takes ~22 us, but the stock call also drops, to ~26
(p10 of the same runs, not shown in the table). TensorFlow's ``SINGLE_THREADED_EXECUTOR`` (as
``executor_type`` in the call's options) and control edges that leave the graph a single root
changed neither, in a scratch measurement. Under load, ratios move: round 24 measured 1.50x at
load 11.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))
from common import identity_call, work_directory
from transforms import print_results, time_model, write_rows

VARIANTS = ("stock", "frozen", "optimized", "table_kept", "litert_fp32", "litert_fp32_1t")


def export_classifier(path: Path, vocabulary: int, length: int) -> list[str]:
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    import keras

    tokens = [f"token{i}" for i in range(vocabulary - 1)]
    keras.utils.set_random_seed(0)
    inputs = keras.Input((length,), dtype="string", name="tokens")
    x = keras.layers.StringLookup(vocabulary=tokens)(inputs)
    x = keras.layers.Embedding(vocabulary, 64)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(10)(x)
    keras.Model(inputs, outputs).export(str(path), verbose=False)
    return tokens


def build_variants(workdir: Path, vocabulary: int, length: int):
    from tfopt.optimizer.candidates.litert.constant_tables import litert_source
    from tfopt.optimizer.candidates.litert.convert import convert_to_litert
    from tfopt.optimizer.inputs.vocabulary import infer_vocabularies
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.optimize.flow import optimize, write_optimized
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE

    stock = workdir / "stock"
    export_classifier(stock, vocabulary, length)
    started = time.perf_counter()
    result = optimize(stock, INFERENCE_RECIPE)
    print(f"  froze and optimized in {time.perf_counter() - started:.1f}s: "
          f"{result.report.summary()}", flush=True)
    table_kept = litert_source(stock, workdir)
    litert = convert_to_litert(table_kept, workdir / "model.tflite", "fp32", overwrite=True)
    paths = {"stock": stock, "table_kept": table_kept,
             "frozen": write_saved_model(result.original, workdir / "frozen", overwrite=True),
             "optimized": write_optimized(result, workdir / "optimized", overwrite=True),
             "litert_fp32": litert.path}
    return paths, infer_vocabularies(result.original.graph_def, result.original.signature)


BINDINGS = ("_call_flat", "call_preflattened", "bound")


def binding_calls(paths: dict[str, Path], feeds) -> dict[str, object]:
    """``{"<variant> <binding>": callable}`` for stock and optimized, and the floor."""
    from tfopt.optimizer.model.freeze import load_signature_function
    from tfopt.optimizer.runtime import load_runner

    calls = {}
    for variant in ("stock", "optimized"):
        runner = load_runner(paths[variant])
        flat = runner.to_tensors(feeds)
        concrete = load_signature_function(paths[variant])
        function = runner._fn
        calls[f"{variant} _call_flat"] = (
            lambda c=concrete, f=flat: c._call_flat(f, c.captured_inputs))
        calls[f"{variant} call_preflattened"] = (
            lambda a=function._atomic, f=[*flat, *function.captured_inputs]:
            a.call_preflattened(f))
        calls[f"{variant} bound"] = runner.bind(flat)
    calls["floor bound"] = identity_call(flat)
    return calls


def _speedup_text(interval) -> str:
    return f"{interval.speedup:.2f}x [{1 / interval.high:.2f}, {1 / interval.low:.2f}]"


def time_bindings(workdir: Path, args) -> int:
    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    # before TensorFlow starts: families.py's settings unless asked otherwise
    apply_runtime_settings(default_runtime_settings(threads=args.intra_op_threads,
                                                    inter_op_threads=args.inter_op_threads))
    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.benchmark.stats import p50_ratio_interval
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.inputs.vocabulary import infer_vocabularies
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.optimize.flow import optimize, write_optimized
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE

    paths = {"stock": workdir / "stock", "optimized": workdir / "optimized"}
    if args.stock and args.optimized:
        paths = {"stock": args.stock, "optimized": args.optimized}
    elif not paths["optimized"].is_dir():
        export_classifier(paths["stock"], args.vocabulary, args.length)
        write_optimized(optimize(paths["stock"], INFERENCE_RECIPE), paths["optimized"])
    frozen = freeze(paths["stock"])
    vocabularies = infer_vocabularies(frozen.graph_def, frozen.signature)
    feeds = make_inputs(get_signature(paths["stock"]), 1, seed=1, vocabularies=vocabularies)
    calls = binding_calls(paths, feeds)
    print(f"timing {len(calls)} calls, blocks of 10, at least {args.seconds:.0f}s / "
          f"{args.min_rounds} rounds ...", flush=True)
    samples = time_interleaved(calls, warmup=args.warmup, min_runs=args.min_rounds,
                               min_seconds=args.seconds, rotate_order=True, block_size=10)
    figures = {name: s.round_figures for name, s in samples.items()}
    print(f"floor (identity function, bound): {np.median(figures['floor bound']) * 1e6:.1f} us")
    ceiling = p50_ratio_interval(figures["stock bound"], figures["floor bound"])
    print(f"ceiling (stock bound / floor): {_speedup_text(ceiling)}")
    print("| binding | stock p50 us | optimized p50 us | stock / optimized [95%] |")
    print("|---|---:|---:|---|")
    for binding in BINDINGS:
        stock, optimized = figures[f"stock {binding}"], figures[f"optimized {binding}"]
        interval = p50_ratio_interval(stock, optimized)
        print(f"| {binding} | {np.median(stock) * 1e6:.1f} | {np.median(optimized) * 1e6:.1f} | "
              f"{_speedup_text(interval)} |")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="minimum timed seconds per batch size (all variants)")
    parser.add_argument("--min-rounds", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls per variant")
    parser.add_argument("--vocabulary", type=int, default=10000, help="embedding rows")
    parser.add_argument("--length", type=int, default=16, help="tokens per example")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--bindings", action="store_true",
                        help="time stock and optimized through each binding (batch 1)")
    parser.add_argument("--stock", type=Path, default=None,
                        help="with --bindings and --optimized: time these SavedModels")
    parser.add_argument("--optimized", type=Path, default=None)
    parser.add_argument("--intra-op-threads", type=int, default=None,
                        help="with --bindings: TensorFlow's intra-op threads (default: the CPUs)")
    parser.add_argument("--inter-op-threads", type=int, default=1,
                        help="with --bindings: TensorFlow's inter-op threads")
    args = parser.parse_args()
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    workdir = work_directory(args.workdir, "tfopt-bench-strings-")
    if args.bindings:
        return time_bindings(workdir, args)

    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.runtime import load_runner

    print(f"StringLookup({args.vocabulary}) -> Embedding({args.vocabulary}x64) -> pooling -> "
          f"Dense: exporting, freezing, optimizing, converting ...", flush=True)
    paths, vocabularies = build_variants(workdir, args.vocabulary, args.length)

    def feeds(signature, batch):
        return make_inputs(signature, batch, seed=1, vocabularies=vocabularies)

    # time_model loads each path with its runtime's defaults; the one-thread LiteRT runner is
    # handed over already loaded.
    one_thread = load_runner(paths["litert_fp32"], num_threads=1)
    paths = {**paths, "litert_fp32_1t": one_thread}
    rows = time_model("string_lookup", paths, {}, batch_sizes, args, VARIANTS, feeds)
    target = write_rows("string_lookup", rows, vocabulary=args.vocabulary,
                        length=args.length, seconds=args.seconds)
    print_results(rows, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
