"""The GTT inference recipe, this package's transforms vs TF's native GTT: op counts and diffs.

    .venv/bin/python benchmarks/gtt_parity.py [--models ResNet50,MobileNetV2] [--workdir DIR]

Each ``keras.applications`` model (``weights=None``, random BatchNorm statistics so that folding
them is not a no-op, ``classifier_activation=None`` so that the outputs compared are logits) is
exported with ``model.export``, frozen, and run through
:data:`tfopt.optimizer.optimize.recipe.INFERENCE_RECIPE` by the Python transforms and by native GTT. Printed
per model: the op counts before / after ours / after native, the batch-norm arithmetic left
after convolutions (a Mul reading a conv or its BiasAdd, an AddV2 reading such a Mul), and the
max |diff| of each result against the original and against each other on one batch of 2.
Not a test; tests/test_gtt_parity.py asserts the same facts. The SavedModels are cached in
``--workdir``.
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
from common import (
    export_keras_application,
    model_names,
    work_directory,
    write_result,
)

OPS = ("Conv2D", "DepthwiseConv2dNative", "BiasAdd", "Mul", "AddV2", "Identity", "Const")
CONVS = ("Conv2D", "DepthwiseConv2dNative")
VARIANTS = ("before", "ours", "native")


def batch_norm_residue(graph_def) -> tuple[int, int]:
    """Mul nodes reading a conv (or a BiasAdd reading one), and AddV2 nodes reading those."""
    from tfopt.optimizer.graph.names import is_control_input, node_name_from_input

    by_name = {n.name: n for n in graph_def.node}

    def sources(node):
        return [by_name[node_name_from_input(i)] for i in node.input if not is_control_input(i)]

    def conv_output(node) -> bool:
        return node.op in CONVS or (node.op == "BiasAdd" and sources(node)[0].op in CONVS)

    muls = {n.name for n in graph_def.node
            if n.op == "Mul" and any(conv_output(s) for s in sources(n))}
    adds = [n for n in graph_def.node
            if n.op in ("Add", "AddV2") and any(s.name in muls for s in sources(n))]
    return len(muls), len(adds)


def max_abs_diff(a: dict, b: dict) -> float:
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def measure(name: str, workdir: Path) -> dict:
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.optimize.native_gtt import run_native_recipe
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE, Recipe
    from tfopt.optimizer.optimize.recipe_building import build_transforms
    from tfopt.optimizer.runtime import load_runner
    from tfopt.optimizer.transforms.pipeline import run_transforms

    original = freeze(export_keras_application(name, workdir, random_batch_norm=True,
                                               logits=True))
    started = time.perf_counter()
    ours = run_transforms(original, build_transforms(Recipe.from_string(INFERENCE_RECIPE)
                                                     .transforms))[0]
    ours_seconds = time.perf_counter() - started
    started = time.perf_counter()
    native = run_native_recipe(original, INFERENCE_RECIPE)
    native_seconds = time.perf_counter() - started
    models = {"before": original, "ours": ours, "native": native}

    feeds = make_inputs(original.signature, batch_size=2, seed=0)
    outputs = {label: load_runner(model)(feeds) for label, model in models.items()}
    counts = {}
    for label, model in models.items():
        ops = model.op_counts()
        residue_mul, residue_add = batch_norm_residue(model.graph_def)
        counts[label] = {**{op: ops.get(op, 0) for op in OPS},
                         "BN Mul after conv": residue_mul, "BN AddV2 after it": residue_add,
                         "nodes": len(model.graph_def.node), "graph bytes": model.size_bytes}
    return {
        "model": name,
        "recipe": INFERENCE_RECIPE,
        "counts": counts,
        "transform_seconds": {"ours": round(ours_seconds, 2), "native": round(native_seconds, 2)},
        "max_abs_diff": {
            "ours vs before": max_abs_diff(outputs["ours"], outputs["before"]),
            "native vs before": max_abs_diff(outputs["native"], outputs["before"]),
            "ours vs native": max_abs_diff(outputs["ours"], outputs["native"]),
        },
    }


def print_table(rows: list[dict]) -> None:
    columns = [*OPS, "BN Mul after conv", "BN AddV2 after it", "nodes", "graph bytes"]
    print("| model | variant | " + " | ".join(columns) + " |")
    print("|---|---|" + "---:|" * len(columns))
    for row in rows:
        for label in VARIANTS:
            cells = " | ".join(f"{row['counts'][label][c]:,}" for c in columns)
            print(f"| {row['model']} | {label} | {cells} |")
    print()
    print("| model | ours vs before | native vs before | ours vs native "
          "| ours took | native took |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        diffs, seconds = row["max_abs_diff"], row["transform_seconds"]
        print(f"| {row['model']} | {diffs['ours vs before']:.2e} | "
              f"{diffs['native vs before']:.2e} | {diffs['ours vs native']:.2e} | "
              f"{seconds['ours']:.1f}s | {seconds['native']:.1f}s |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="ResNet50,MobileNetV2")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the exported SavedModels are cached")
    args = parser.parse_args()
    names = model_names(parser, args.models)
    workdir = work_directory(args.workdir, "tfopt-bench-gtt-parity-")
    rows = []
    for name in names:
        print(f"{name}: exporting, freezing, optimizing ...", flush=True)
        rows.append(measure(name, workdir))
    print(f"\nrecipe: {rows[0]['recipe']}\n")
    print_table(rows)
    print(f"\nresults: {write_result('gtt_parity', {'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
