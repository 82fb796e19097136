"""p50 latency of a string-token classifier: stock SavedModel vs frozen vs optimized vs LiteRT.

    .venv/bin/python benchmarks/string_lookup.py [--batch-sizes 1,32] [--seconds 20]
        [--vocabulary 10000] [--length 16] [--workdir DIR]

The model is the one issue 12 reported: string tokens -> Keras ``StringLookup`` (a vocabulary
of ``--vocabulary`` - 1 tokens and the out-of-vocabulary index) -> ``Embedding(vocabulary x
64)`` -> ``GlobalAveragePooling1D`` -> ``Dense(10)``, random weights, exported with
``model.export``. Variants:

- ``stock``: the exported SavedModel (its table is a ``HashTableV2`` behind a function call);
- ``frozen``: :func:`optimizer.model.freeze.freeze`, the table folded into constants
  (:mod:`optimizer.graph.lookup_tables`) and, as the lookup only indexes the embedding, into one
  gather of the embedding's rows (:mod:`optimizer.graph.lookup_gathers`), written back as a
  SavedModel;
- ``optimized``: frozen + :data:`optimizer.optimize.recipe.INFERENCE_RECIPE`;
- ``table_kept``: what folding is weighed against: the frozen graph with its table kept as a
  ``HashTableV2`` filled from constants (the SavedModel the LiteRT converter reads,
  :mod:`optimizer.candidates.litert.constant_tables`), run by TensorFlow;
- ``litert_fp32``: the LiteRT fp32 candidate (its table as LiteRT's hash-table builtins), run by
  ai-edge-litert with XNNPACK on every CPU this process may use, and ``litert_fp32_1t`` on one.

Inputs are tokens drawn from the model's own vocabulary with a quarter out of it
(:func:`optimizer.inputs.generated.make_inputs`). All variants of one batch size are timed interleaved in
this one process (:func:`benchmarks.transforms.time_model`, which calls each model's
``ModelRunner.call``: a TensorFlow signature by keyword, as a Python user calls it, where the
gate's benchmark and ``benchmarks/families.py`` time the bound call); each speedup is ``p50(stock) /
p50(variant)`` with a 95% paired block-bootstrap interval, and ``max|diff|`` is against the
stock model's outputs on the timed batch.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))
from common import work_directory
from transforms import print_results, time_model, write_rows

VARIANTS = ("stock", "frozen", "optimized", "table_kept", "litert_fp32", "litert_fp32_1t")


def export_classifier(path: Path, vocabulary: int, length: int) -> list[str]:
    from optimizer.tf_runtime import import_tensorflow

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
    from optimizer.candidates.litert.constant_tables import litert_source
    from optimizer.candidates.litert.convert import convert_to_litert
    from optimizer.inputs.vocabulary import infer_vocabularies
    from optimizer.model.export import write_saved_model
    from optimizer.optimize.flow import optimize, write_optimized
    from optimizer.optimize.recipe import INFERENCE_RECIPE

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
    args = parser.parse_args()
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    workdir = work_directory(args.workdir, "tfopt-bench-strings-")

    from optimizer.inputs.generated import make_inputs
    from optimizer.runtime import load_runner

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
