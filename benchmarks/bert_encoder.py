"""Where the BERT-style encoder's time goes, and what each ``savedmodel`` step buys: per-op
profile and one-process timing of the stock call against the optimized graphs, bfloat16 and XLA.

    nice -n 19 .venv/bin/python benchmarks/bert_encoder.py --prepare [--workdir DIR]
    flock /work/wt/bench.lock .venv/bin/python benchmarks/bert_encoder.py [--workdir DIR]
        [--seconds 15] [--rounds 10] [--profile-calls 20]

The encoder is the ``bert`` family of ``benchmarks/families.py`` (:func:`families.export_encoder`:
4 layers, hidden 256, 4 heads, FFN 1024, length 64, every weight drawn). Variants, each written
as a SavedModel and loaded as TF Serving loads them (:func:`tfopt.optimizer.runtime.load_runner`):

- ``stock``: the exported SavedModel's signature call, the baseline;
- ``gtt``: frozen, GTT's inference recipe (:data:`tfopt.optimizer.optimize.recipe.GTT_INFERENCE_RECIPE`);
- ``gelu``: GTT's recipe with ``rewrite_gelu_erf`` (the default recipe before this round);
- ``optimized``: the default recipe (:data:`tfopt.optimizer.optimize.recipe.INFERENCE_RECIPE`, with
  ``flatten_dense_matmuls`` and ``einsum_as_batch_matmul``);
- ``optimized_einsum``: the default recipe without ``einsum_as_batch_matmul`` (attention's
  ``Einsum``s kept, as before round 25);
- ``bf16_all``: ``optimized`` through Grappler's bfloat16 pass with its own lists (every op it
  can, LayerNorm and Softmax included), as the bf16 candidate was before this round;
- ``bf16``: the bf16 candidate (:func:`tfopt.optimizer.candidates.bf16.bf16_mixed_precision`: the
  normalizations in float32);
- ``bf16_einsum``: the bf16 candidate of ``optimized_einsum``;
- ``xla``: the XLA candidate of ``optimized``.

``--labels`` builds and times only those variants (and ``stock``). Printed: per variant, the p50 of blocks of 10 calls (:func:`tfopt.optimizer.benchmark.interleaved.
time_interleaved`, order rotating every round) and its ratio to ``stock`` (p50 over p50, one
process, one run), the largest output difference to ``stock`` and the top-1 agreement over 64
inputs with ids drawn from the vocabulary, and each ratio to ``stock`` with its 95% interval
over paired rounds (:func:`tfopt.optimizer.benchmark.stats.p50_ratio_interval`); then, for ``optimized``, ``bf16_all`` and ``bf16``,
the time per op type from TensorFlow's step stats (a v1 ``Session`` with full tracing on the
same SavedModel, ``--profile-calls`` calls: traced times, so only the shares mean something).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(REPO))

BLOCK_SIZE = 10
QUALITY_INPUTS = 64


LABELS = ("stock", "gtt", "gelu", "optimized_einsum", "optimized", "bf16_all", "bf16_einsum",
          "bf16", "xla")
# the recipe each frozen variant is built with, and the bf16 candidates' float32 graphs
WITHOUT_EINSUM = "einsum_as_batch_matmul "
BF16_OF = {"bf16_all": "optimized", "bf16": "optimized", "bf16_einsum": "optimized_einsum"}


def build_variants(workdir: Path, labels=LABELS) -> dict[str, Path]:
    """SavedModel paths by label (``stock`` and ``labels``), built unless ``workdir`` holds
    them (``--prepare`` builds them outside the benchmark lock)."""
    from families import export_encoder

    built = {label: workdir / label for label in labels if label != "stock"}
    if all((path / "saved_model.pb").is_file() for path in built.values()):
        return {"stock": export_encoder(workdir), **built}

    from tfopt.optimizer.candidates.bf16 import BF16_PASSES, bf16_mixed_precision
    from tfopt.optimizer.candidates.xla import write_xla_saved_model
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.optimize.recipe import GTT_INFERENCE_RECIPE, INFERENCE_RECIPE, Recipe
    from tfopt.optimizer.optimize.recipe_building import build_transforms
    from tfopt.optimizer.transforms.pipeline import run_transforms
    from tfopt.optimizer.transforms.registry import make_transform

    stock = export_encoder(workdir)
    paths = {"stock": stock}
    frozen = freeze(stock)
    recipes = {"gtt": GTT_INFERENCE_RECIPE,
               "gelu": GTT_INFERENCE_RECIPE.replace("merge_duplicate_nodes",
                                                    "rewrite_gelu_erf merge_duplicate_nodes"),
               "optimized_einsum": INFERENCE_RECIPE.replace(WITHOUT_EINSUM, ""),
               "optimized": INFERENCE_RECIPE}
    needed = {BF16_OF.get(label, "optimized" if label == "xla" else label) for label in built}
    models = {}
    for label, recipe in recipes.items():
        if label in needed:
            models[label], _ = run_transforms(
                frozen, build_transforms(Recipe.from_string(recipe).transforms))
    if "bf16_all" in built:
        models["bf16_all"], _ = run_transforms(
            models["optimized"], [make_transform("grappler", optimizers=list(BF16_PASSES))])
    for label in ("bf16", "bf16_einsum"):
        if label in built:
            models[label] = bf16_mixed_precision(models[BF16_OF[label]])
    for label, model in models.items():
        if label in built:
            paths[label] = write_saved_model(model, workdir / label, overwrite=True)
    if "xla" in built:
        paths["xla"] = write_xla_saved_model(models["optimized"], workdir / "xla",
                                             overwrite=True)
    return paths


def op_profile(path: Path, feeds: dict, calls: int) -> collections.Counter:
    """Traced microseconds per op type per call, from a v1 Session's step stats."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    graph = tf.Graph()
    totals: collections.Counter = collections.Counter()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(path))
        signature = meta.signature_def["serving_default"]
        feed_dict = {signature.inputs[k].name: v for k, v in feeds.items()}
        fetches = [t.name for t in signature.outputs.values()]
        for _ in range(5):
            session.run(fetches, feed_dict)
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        for _ in range(calls):
            metadata = tf.compat.v1.RunMetadata()
            session.run(fetches, feed_dict, options=options, run_metadata=metadata)
            for device in metadata.step_stats.dev_stats:
                for node in device.node_stats:
                    label = node.timeline_label
                    op = label.split("= ")[-1].split("(")[0].strip() if "= " in label \
                        else node.node_name
                    totals[op] += (node.op_end_rel_micros - node.op_start_rel_micros) / calls
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=REPO / "work" / "bert_encoder")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile-calls", type=int, default=20)
    parser.add_argument("--labels", nargs="+", choices=LABELS[1:], default=list(LABELS[1:]),
                        help="the variants to build and time beside stock (default: all)")
    parser.add_argument("--prepare", action="store_true",
                        help="only build the variants (no timing: run it outside the lock)")
    args = parser.parse_args()

    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    apply_runtime_settings(default_runtime_settings())  # before TensorFlow starts
    from families import BERT_VOCABULARY

    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.runtime import load_runner

    args.workdir.mkdir(parents=True, exist_ok=True)
    paths = build_variants(args.workdir, args.labels)
    if args.prepare:
        return 0
    runners = {label: load_runner(path) for label, path in paths.items()}
    ranges = {"token_ids": (0, BERT_VOCABULARY)}
    feeds = make_inputs(runners["stock"].signature, 1, 0, ranges)
    quality_feeds = [make_inputs(runners["stock"].signature, 1, seed, ranges)
                     for seed in range(1, QUALITY_INPUTS + 1)]

    def first_output(runner, f):
        return np.asarray(next(iter(runner(f).values())))

    reference = [first_output(runners["stock"], f) for f in quality_feeds]
    quality = {}
    for label, runner in runners.items():
        outputs = [first_output(runner, f) for f in quality_feeds]
        quality[label] = (max(float(np.max(np.abs(o - r))) for o, r in zip(outputs, reference)),
                          float(np.mean([o.argmax() == r.argmax()
                                         for o, r in zip(outputs, reference)])))
    calls = {label: runner.bind(runner.to_tensors(feeds)) for label, runner in runners.items()}
    samples = time_interleaved(calls, warmup=5, min_runs=args.rounds, min_seconds=args.seconds,
                               block_size=BLOCK_SIZE, rotate_order=True)
    print(f"batch 1, blocks of {BLOCK_SIZE}, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for label in runners:
        diff, agreement = quality[label]
        print(f"{label:16s} p50 {samples[label].p50 * 1e3:8.3f} ms  "
              f"{speedup(samples, 'stock', label)}  rounds {samples[label].rounds}  "
              f"max abs diff {diff:.1e}  top-1 agreement {agreement:.3f}")
    for with_, without in (("optimized", "optimized_einsum"), ("bf16", "bf16_einsum")):
        if with_ in samples and without in samples:
            print(f"{with_} against {without}: {speedup(samples, without, with_)}")
    for label in (x for x in ("optimized_einsum", "optimized", "bf16_all", "bf16_einsum", "bf16")
                  if x in paths):
        profile = op_profile(paths[label], feeds, args.profile_calls)
        total = sum(profile.values())
        print(f"\n{label}: traced op time {total / 1e3:.2f} ms per call")
        for op, micros in profile.most_common(12):
            print(f"  {op:28s} {micros / 1e3:7.3f} ms {100 * micros / total:5.1f}%")
    return 0


def speedup(samples: dict, base: str, label: str) -> str:
    """``label``'s speed over ``base``'s: p50 over p50, and the median of the paired per-round
    ratios with its 95% interval."""
    from tfopt.optimizer.benchmark.stats import p50_ratio_interval

    paired = p50_ratio_interval(samples[base].round_figures, samples[label].round_figures)
    return (f"x{samples[base].p50 / samples[label].p50:.3f} (paired x{1 / paired.ratio:.3f} "
            f"[{1 / paired.high:.3f}, {1 / paired.low:.3f}])")


if __name__ == "__main__":
    sys.exit(main())
