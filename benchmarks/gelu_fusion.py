"""Exact GELU fused or not: the default recipe (with ``rewrite_gelu_erf``) against GTT's inference
recipe on the BERT-style encoder of ``benchmarks/families.py``, in one process, timed in blocks.

    flock /work/wt/bench.lock .venv/bin/python benchmarks/gelu_fusion.py [--biases random|zeros]
        [--workdir DIR] [--batch 1] [--seconds 20] [--rounds 10]

The encoder comes from :func:`families.export_encoder` (4 layers, hidden 256, FFN 1024 with
Keras's exact GELU, length 64) and is frozen. Since round 23 that export draws every weight,
biases included. Grappler's constant folding drops a BiasAdd of zeros (Keras's initial biases)
before the remapper sees it, so that nothing fuses with the GELU. ``--biases random`` (the
default) gives every BiasAdd of the frozen graph a bias drawn from N(0, 0.05), seeded, to stand
for a trained model; ``--biases zeros`` sets them to zeros, as an untrained Keras model has them.

Two variants of that frozen graph, written as SavedModels and loaded as TF Serving loads them:
``gtt`` through :data:`tfopt.optimizer.optimize.recipe.GTT_INFERENCE_RECIPE`, ``default`` through
:data:`tfopt.optimizer.optimize.recipe.INFERENCE_RECIPE`. Printed per variant: how many ``_FusedMatMul`` nodes
Grappler makes with the passes TensorFlow runs at load (``grappler`` transform, nodes on the
CPU) and what they fuse, the p50 of blocks of 10 calls (:func:`tfopt.optimizer.benchmark.interleaved.
time_interleaved`, order rotating every round) and its ratio to ``gtt``, and the largest output
difference to ``gtt`` on the timing input.
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
BIAS_SCALE = 0.05


def with_random_biases(model, seed: int = 0, scale: float = BIAS_SCALE):
    """``model`` with every BiasAdd's constant bias drawn from N(0, ``scale``) (zeros for 0)."""
    from tfopt.optimizer.graph.consts import resolve_through_identity, values_from_const
    from tfopt.optimizer.graph.rewrite import make_const
    from tfopt.optimizer.graph.traversal import nodes_by_name

    rng = np.random.default_rng(seed)
    graph = type(model.graph_def)()
    graph.CopyFrom(model.graph_def)
    by_name = nodes_by_name(graph)
    for node in graph.node:
        if node.op != "BiasAdd":
            continue
        const = resolve_through_identity(by_name, node.input[1])
        shape = values_from_const(const).shape
        values = rng.normal(0, scale, shape).astype(np.float32)
        const.attr["value"].CopyFrom(make_const(const.name, values).attr["value"])
    return model.with_graph(graph, "random biases")


def fused_matmuls(model) -> collections.Counter:
    """``fused ops -> count`` of the ``_FusedMatMul`` nodes Grappler makes of ``model`` at load."""
    from tfopt.optimizer.transforms.grappler import DEFAULT_OPTIMIZERS
    from tfopt.optimizer.transforms.pipeline import context_for
    from tfopt.optimizer.transforms.registry import make_transform

    optimized = make_transform("grappler", optimizers=list(DEFAULT_OPTIMIZERS))(
        model.graph_def, context_for(model))
    return collections.Counter("+".join(s.decode() for s in n.attr["fused_ops"].list.s)
                               for n in optimized.node if n.op == "_FusedMatMul")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--biases", choices=("random", "zeros"), default="random")
    parser.add_argument("--workdir", type=Path, default=REPO / "work" / "gelu_fusion")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

    apply_runtime_settings(default_runtime_settings())  # before TensorFlow starts
    from families import BERT_VOCABULARY, export_encoder

    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.optimize.recipe import GTT_INFERENCE_RECIPE, INFERENCE_RECIPE, Recipe
    from tfopt.optimizer.optimize.recipe_building import build_transforms
    from tfopt.optimizer.runtime import load_runner
    from tfopt.optimizer.transforms.pipeline import run_transforms

    args.workdir.mkdir(parents=True, exist_ok=True)
    frozen = freeze(export_encoder(args.workdir))
    frozen = with_random_biases(frozen, scale=BIAS_SCALE if args.biases == "random" else 0.0)
    runners, fusions = {}, {}
    for label, recipe in (("gtt", GTT_INFERENCE_RECIPE), ("default", INFERENCE_RECIPE)):
        model, _ = run_transforms(frozen, build_transforms(Recipe.from_string(recipe).transforms))
        fusions[label] = fused_matmuls(model)
        path = write_saved_model(model, args.workdir / f"{args.biases}_{label}", overwrite=True)
        runners[label] = load_runner(path)
    feeds = make_inputs(runners["gtt"].signature, args.batch, 0,
                        {"token_ids": (0, BERT_VOCABULARY)})
    reference = runners["gtt"](feeds)
    calls = {}
    for label, runner in runners.items():
        tensors = runner.to_tensors(feeds)
        calls[label] = lambda runner=runner, tensors=tensors: runner.call(tensors)
    samples = time_interleaved(calls, min_runs=args.rounds, min_seconds=args.seconds,
                               block_size=BLOCK_SIZE, rotate_order=True)
    base = samples["gtt"].p50
    print(f"biases {args.biases}, batch {args.batch}, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for label, runner in runners.items():
        outputs = runner(feeds)
        diff = max(float(np.max(np.abs(outputs[k] - reference[k]))) for k in reference)
        fused = ", ".join(f"{n} {ops}" for ops, n in sorted(fusions[label].items())) or "none"
        print(f"{label:8s} p50 {samples[label].p50 * 1e3:8.3f} ms  x{base / samples[label].p50:.3f}"
              f"  rounds {samples[label].rounds}  max abs diff {diff:.1e}  _FusedMatMul: {fused}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
