"""How much memory a model takes once loaded and called, estimated from its size on disk.

The benchmark must know before it loads anything whether baseline and candidates fit in the
memory budget together (:mod:`tfopt.optimizer.benchmark.memory_groups`), and a model too big to load
at all is refused before any work (:func:`require_fits_alone`). Loading is what costs, not the
file: TensorFlow builds its graph, keeps the constants and runs Grappler at the first call;
XLA compiles; a bf16 graph gets bf16 copies of its weights. So each format (and the variants
that are known to cost more) has a factor over the bytes on disk, measured on this project's
dense MLPs (200 MB on disk, tree RSS of a fresh process that loads the model and calls it):

- TensorFlow runtime alone, imported and started: ~0.6 GiB (:data:`PROCESS_BYTES`);
- a SavedModel with its weights in variables (a stock model) loaded and called: 1.1-1.3x
  its size on disk (0.20 GiB for a 191 MiB MLP), estimated at 3.5x (a benchmark process as a
  whole measured ~1.4x the sum of former estimates);
- a frozen SavedModel (tfopt's optimized graph: the weights are constants in the graph) costs
  far more than its weights, because a load copies the graph several times over
  (benchmarks/load_memory.py; :class:`tfopt.optimizer.runtime.tensorflow.SignatureFunction` lets
  most copies go before the first call): its peak over the running process ~11.3x its size
  (0.27 GiB for a 24 MiB MLP, 1.07 for a 95 MiB one), of which it keeps ~4.3x
  (:data:`FROZEN_FACTOR`);
- its bf16 variant, the factor applied to the bf16 model's own size (its weights 2 bytes a
  value, :func:`tfopt.optimizer.candidates.bf16.pack_bfloat16_constants`): 18-20x (0.22 GiB for
  12 MiB, 0.86 for 48 MiB; ResNet50's 49 MiB 0.93), keeping ~6-8x; its XLA variant: ~21x (0.49 GiB for 24 MiB, 1.94 for
  95 MiB; XLA's compiled constants stay: it keeps ~16x). Both lines run through ~0 at size 0:
  no fixed cost of their own (:data:`VARIANT_FIXED_BYTES`);
- LiteRT (the flatbuffer is read, XNNPACK repacks the weights): 2.5x measured (a 24 MiB fp32
  flatbuffer grew a fresh process by 2.48x its size); ONNX Runtime, OpenVINO: ~2x;
- a benchmark process as a whole measured ~1.4x the sum of its models' former estimates (3.2
  GiB where 2.3 were estimated, mlp_100mb's group of the optimized model and 4 LiteRT
  flavours): the SavedModel and LiteRT factors below are raised to match it;
- freezing and transforming (the optimize stage): ~14x, and the process keeps ~6x after it;
  in the optimize worker that big models get (:mod:`tfopt.optimizer.optimize.worker`), ~9x.

Each load has two figures (:class:`LoadCost`): its peak over the process and what it keeps
once called; a benchmark group's models load one after another, so the group holds what they
keep and peaks at the largest transient (:func:`group_bytes`). Measured in one benchmark group
process of mlp_100mb, the VmHWM reset at each phase (r24): the stock SavedModel peaked 0.20
GiB and kept 0.20 (1.05x of 191 MiB); the optimized frozen model peaked 1.06 over the process
and kept 0.56 (11.1x, 6.0x of 95 MiB); bf16 0.86 and 0.24 (18x, 5.2x of 48 MiB); XLA 1.92
and 0.90 (20.2x, 9.4x), then +0.49 GiB at the fidelity check (its batch of 8 is compiled
again: 14.6x kept); a LiteRT int8's thread choice 0.11 (two interpreters, 4.6x of 24 MiB),
keeping 0.08. A second load of the baseline (the twin) added nothing. The optimized model
(variant ``fp32``) was estimated as a stock SavedModel, 3.5x where it costs 11x: a variant
without a factor of its own now takes its format's, frozen or not.

The factors are rounded up: a group that is estimated to fit and does not is killed, one that
is split needlessly only takes longer.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget

PROCESS_BYTES = int(0.6 * GIB)
# A model's load has two figures: its peak over the process (the load and the first call:
# parsing, the graph's copies, Grappler, XLA's compilation) and what it keeps once called.
# Models loaded one after another into one benchmark process hold what each keeps, and the
# process peaks when the one with the largest transient loads on top of the others
# (:func:`group_bytes`); adding peaks counted every load's transient at once (mlp_100mb's
# group of the optimized model, bf16 and a LiteRT int8: 2.64 GiB estimated, 2.24 measured).
# Peak, bytes over the process per byte on disk, by format; by variant where a variant differs.
# A stock SavedModel (weights in variables) peaked at 1.05x (0.20 GiB for mlp_100mb's 191 MiB);
# a LiteRT model's peak is its thread choice's two interpreters (mlp_100mb's int8 4.6x)
FORMAT_FACTOR = {"savedmodel": 2.0, "tflite": 5.0, "onnx": 2.5, "openvino": 2.5}
# Kept once loaded and called, per byte on disk: the stock MLP 1.05x, a LiteRT int8 3.3x
KEPT_FACTOR = {"savedmodel": 1.5, "tflite": 3.5, "onnx": 2.5, "openvino": 2.5}
# a SavedModel with no variables (its weights are constants in its graph): the load's peak over
# the process, per byte on disk, measured 11.2x and 11.4x (95 and 24 MiB MLPs); 11.1x in a
# benchmark group (mlp_100mb's optimized model, VmHWM reset at its load), keeping 6.0x
FROZEN_FACTOR = 12.0
FROZEN_KEPT_FACTOR = 7.0
# by variant, per byte of the variant's own SavedModel (measured with its load's copies let go:
# bf16 18.2x and 18.4x on the MLPs, 19.6x on ResNet50; XLA 20.8x and 20.9x, 19.8x on ResNet50;
# in a benchmark group, mlp_100mb: bf16 18.0x, XLA 20.2x); bf16 was 16x of a file whose
# weights took 4 bytes a value in memory and 2.4 on disk, which underestimated its group by 50%
# (3.87 GiB measured where 2.58 were estimated, mlp_100mb)
VARIANT_FACTOR = {"bf16": 20.0, "xla": 21.0}
# kept, by variant: bf16 5.2x (mlp_100mb), 6-8x (load_memory.py); XLA 9.4x after its first
# call and 14.6x after the fidelity check, whose batch of 8 is compiled again (+0.49 GiB)
VARIANT_KEPT_FACTOR = {"bf16": 8.0, "xla": 16.0}
# a cost of their own whatever the model's size: the lines through both sizes' measurements
# cross ~0 at size 0 (bf16 +0.002 GiB, XLA +0.017): XLA's compiler is loaded in every process
VARIANT_FIXED_BYTES = {"bf16": 0, "xla": int(0.05 * GIB)}
# converting a SavedModel to LiteRT by hand, per byte on disk beside the runtime: 0.86 GiB for
# a 48 MiB MLP, 1.36 GiB for a 191 MiB one (3.8x to 4.7x over the runtime's 0.6 GiB)
CONVERSION_FACTOR = 4.0
# the working set a big model's benchmark groups aim at, over that conversion: the issue's
# target is the whole step within 2x of converting the model by hand
WORKING_SET_RATIO = 2.0
# a candidate's build in a worker process, over the runtime: 2.4 GiB measured for a 191 MiB
# MLP (9.5x), 1.2 GiB for a 48 MiB one (12x, the converter's own fixed costs weigh more)
BUILD_FACTOR = 10.0
# freezing and transforming hold the SavedModel, its frozen GraphDef and rewrites of it: the
# optimize stage of tfopt optimize peaked at 1.2 GiB for a 48 MiB MLP (13x over the runtime)
OPTIMIZE_FACTOR = 14.0
# the optimize worker (tfopt.optimizer.optimize.worker), which lets the original and every
# intermediate graph go and checks one model at a time: 2.2 GiB for a 191 MiB MLP (8.2x)
OPTIMIZE_WORKER_FACTOR = 9.0
# the step's process while its workers optimize, build and time a big model: it never starts
# TensorFlow (it reads the protos it needs without it, tfopt.optimizer.model.tf_protos)
STEP_PROCESS_BYTES = int(0.1 * GIB)
# what the process that optimized keeps afterwards (its runtime, caches, freed but unreturned
# heap): 0.9 GiB for the same MLP
RESIDUE_FACTOR = 6.0


def disk_bytes(path: str | os.PathLike) -> int:
    """A model's bytes on disk: a SavedModel directory's files, or a model file and the
    companions it loads (an OpenVINO IR's ``.bin``)."""
    path = Path(path)
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    total = path.stat().st_size if path.exists() else 0
    weights = path.with_suffix(".bin")
    if path.suffix == ".xml" and weights.exists():
        total += weights.stat().st_size
    return total


def loaded_bytes(path: str | os.PathLike, format: str = "savedmodel",
                 variant: str | None = None) -> int:
    """The estimated peak a model's load and first call add to a process already running."""
    return _estimate(path, format, variant, VARIANT_FACTOR, FROZEN_FACTOR, FORMAT_FACTOR)


def kept_bytes(path: str | os.PathLike, format: str = "savedmodel",
               variant: str | None = None) -> int:
    """The estimated memory a loaded and called model keeps in the process."""
    return min(loaded_bytes(path, format, variant), _estimate(
        path, format, variant, VARIANT_KEPT_FACTOR, FROZEN_KEPT_FACTOR, KEPT_FACTOR))


def _estimate(path, format: str, variant: str | None, by_variant: dict, frozen: float,
              by_format: dict) -> int:
    # a variant without a factor of its own (the optimized model's "fp32") is its format's
    if variant in by_variant:
        factor = by_variant[variant]
    elif format == "savedmodel" and is_frozen(path):
        factor = frozen
    else:
        factor = by_format.get(format, 2.5)
    return VARIANT_FIXED_BYTES.get(variant or "", 0) + int(factor * disk_bytes(path))


@dataclass(frozen=True)
class LoadCost:
    """A model's estimated cost in a process: what it keeps, and its load's transient above
    that (:func:`loaded_bytes` minus :func:`kept_bytes`)."""

    kept: int
    transient: int = 0

    @classmethod
    def of(cls, path: str | os.PathLike, format: str = "savedmodel",
           variant: str | None = None) -> LoadCost:
        kept = kept_bytes(path, format, variant)
        return cls(kept, loaded_bytes(path, format, variant) - kept)


def group_bytes(costs: Iterable[LoadCost]) -> int:
    """The estimated peak of models loaded one after another into one process, over the
    process: all they keep, plus the largest transient (whichever model loads last)."""
    costs = list(costs)
    return sum(c.kept for c in costs) + max((c.transient for c in costs), default=0)


def is_frozen(path: str | os.PathLike) -> bool:
    """Whether a SavedModel directory holds no variables: its weights are in its graph."""
    variables = Path(path) / "variables"
    return Path(path).is_dir() and not any(variables.glob("variables.data-*"))


def conversion_bytes(path: str | os.PathLike) -> int:
    """The estimated peak of converting the SavedModel to LiteRT by hand, in a fresh process:
    what a user expects a step on it to need."""
    return PROCESS_BYTES + int(CONVERSION_FACTOR * disk_bytes(path))


def working_set_bytes(path: str | os.PathLike) -> int:
    """What a big model's benchmark groups aim to hold, the step's process included
    (:mod:`tfopt.optimizer.benchmark.memory_groups`)."""
    return int(WORKING_SET_RATIO * conversion_bytes(path))


def building_bytes(path: str | os.PathLike) -> int:
    """The estimated peak of a worker building one candidate (or one shared conversion) from
    the SavedModel: a converter, an XLA trace or a bf16 retyping in a fresh process."""
    return PROCESS_BYTES + int(BUILD_FACTOR * disk_bytes(path))


# From this size on disk, the optimize stage, each candidate build and the benchmark run in
# worker processes of their own: below it, a worker's TensorFlow import (seconds, ~0.5 GiB)
# costs more than the memory it gives back.
WORKERS_FROM_BYTES = 32 * 2**20


def _in_workers(size: int) -> bool:
    return size >= WORKERS_FROM_BYTES


def builds_in_workers(path: str | os.PathLike) -> bool:
    """Whether ``path`` is big enough for its heavy stages to run in worker processes
    (:data:`WORKERS_FROM_BYTES`)."""
    return _in_workers(disk_bytes(path))


def optimizing_bytes(path: str | os.PathLike) -> int:
    """The estimated peak of freezing, transforming and checking a SavedModel: in one
    process, or, for a big model, in the optimize worker beside the step's process."""
    size = disk_bytes(path)
    if _in_workers(size):
        return PROCESS_BYTES + int(OPTIMIZE_WORKER_FACTOR * size) + STEP_PROCESS_BYTES
    return PROCESS_BYTES + int(OPTIMIZE_FACTOR * size)


def job_minimum_bytes(path: str | os.PathLike) -> int:
    """The least ``tfopt optimize --targets`` can take for this SavedModel: the largest of
    its stages. In one process: optimizing, then benchmarking beside what optimizing left
    (a benchmark process holding the baseline and one candidate of its size). A big model's
    stages run in worker processes one at a time beside the step's process, which holds no
    TensorFlow (:data:`STEP_PROCESS_BYTES`): optimizing, one candidate's build, or that
    benchmark."""
    size = disk_bytes(path)
    pair = 2 * int(FORMAT_FACTOR["savedmodel"] * size)
    if _in_workers(size):
        return max(optimizing_bytes(path), STEP_PROCESS_BYTES + building_bytes(path),
                   STEP_PROCESS_BYTES + PROCESS_BYTES + pair)
    benchmark = 2 * PROCESS_BYTES + int(RESIDUE_FACTOR * size) + pair
    return max(optimizing_bytes(path), benchmark)


def require_fits_alone(path: str | os.PathLike, budget: MemoryBudget,
                       what: str | None = None) -> int:
    """Refuse (exit 7) a SavedModel that could not even be loaded alone within ``budget``;
    the estimate otherwise."""
    estimate = PROCESS_BYTES + loaded_bytes(path)
    budget.require(estimate, what or f"loading the model {path} ({disk_bytes(path) / GIB:.2f} "
                                      f"GiB on disk)")
    return estimate
