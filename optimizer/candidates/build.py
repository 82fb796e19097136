"""More candidates from one model, each tagged with the runtime and format it needs.

The optimized float32 SavedModel (the recipe or search result) is one candidate; from it and the
source this module derives the others the config's ``targets`` allow:

``savedmodel`` (TF Serving, ``tf.saved_model.load``)
    ``bf16``: oneDNN bfloat16 automatic mixed precision baked into the graph, only on a CPU with
    native bfloat16 (:mod:`tfopt.optimizer.candidates.bf16`); ``xla``: the graph as one function XLA must
    compile (:mod:`tfopt.optimizer.candidates.xla`; TF Serving needs ``--xla_cpu_compilation_enabled=true``).
``litert`` (the ``ai-edge-litert`` interpreter with XNNPACK)
    ``litert_fp32``, ``litert_fp16`` (float16 weights), ``litert_dynamic_int8`` (dynamic-range
    int8) and ``litert_full_int8`` (int8 calibrated on representative inputs), converted from the
    source SavedModel by :mod:`tfopt.optimizer.candidates.litert.convert`; a model with while loops of fixed
    length (a Keras LSTM or GRU), which the converter cannot lower as loops, from its frozen
    graph with those loops unrolled (:mod:`tfopt.optimizer.candidates.litert.unrolled_source`).
``onnx`` (ONNX Runtime, CPU provider)
    ``onnx_fp32`` (tf2onnx's graph), ``onnx_optimized`` (ONNX Runtime's graph optimizations
    saved into the file), ``onnx_dynamic_int8`` and ``onnx_static_int8`` (QDQ, calibrated),
    from the source SavedModel by :mod:`tfopt.optimizer.candidates.onnx.convert`; tf2onnx runs once for all four.
``openvino`` (OpenVINO's CPU plugin)
    ``openvino_fp32``, ``openvino_bf16`` (the same IR compiled with the bf16 precision hint,
    native bfloat16 CPUs only) and ``openvino_int8`` (NNCF, calibrated), from the source
    SavedModel by :mod:`tfopt.optimizer.candidates.openvino.convert`; converted once for all three.

The calibrating flavours (LiteRT full int8, ONNX static int8, OpenVINO int8) all take the same
:class:`~tfopt.optimizer.inputs.calibration.Calibration`: the calibration data, else the eval data's inputs,
else inputs generated from the signature. A calibrated candidate says what it was calibrated on
(:attr:`Candidate.calibration`: ``data`` or ``synthetic``), so that one fitted to generated noise
is never taken for one fitted to real inputs; the others say nothing (``None``).

A candidate that cannot be built here (no native bfloat16, an op XLA or a converter refuses) is
*skipped* with its one-line reason, never fatal: the others still go to the benchmark, and the
gate picks the fastest one inside the accuracy budget. None of these candidates is held to the
float rewrite's equivalence bound; their accuracy is what the evaluation measures and the gate's
budget bounds.

A model with lookup tables is converted from a rewrite with the tables filled from constants and
the outputs' shapes pinned (:mod:`tfopt.optimizer.candidates.litert.constant_tables`), which the converter keeps as
LiteRT's hash-table builtins. Every LiteRT candidate is run once on generated inputs before
it is listed: a flatbuffer that converts but cannot run here is skipped with the interpreter's
reason, not found out by the benchmark.

Each candidate of another format is a directory holding its model file(s) and the JSON sidecar
(``model.tflite`` and ``model.tflite.json``; ``model.onnx`` and ``model.onnx.json``;
``model.xml``, ``model.bin`` and ``model.xml.json``: what it is, how to load it), so that every
candidate is a directory to store and publish; :attr:`Candidate.path` names the file a runner
loads.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfopt.optimizer.candidates.candidate import Candidate, Skipped
from tfopt.optimizer.candidates.litert.unrolled_source import LiteRTSource
from tfopt.optimizer.errors import InvalidInputsError, TfoptError, first_line
from tfopt.optimizer.inputs.calibration import Calibration, synthetic
from tfopt.optimizer.model.footprint import WORKERS_FROM_BYTES, builds_in_workers
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.system.memory_budget import MemoryBudget

log = logging.getLogger(__name__)

TARGETS = ("savedmodel", "litert", "onnx", "openvino")
SAVEDMODEL_VARIANTS = ("bf16", "xla")
LITERT_FLAVOURS = ("fp32", "fp16", "dynamic_int8", "full_int8")
ONNX_FLAVOURS = ("fp32", "optimized", "dynamic_int8", "static_int8")
OPENVINO_FLAVOURS = ("fp32", "bf16", "int8")
# The flavours that calibrate on representative inputs, by target.
CALIBRATING = {"litert": ("full_int8",), "onnx": ("static_int8",), "openvino": ("int8",)}
CALIBRATING_LABELS = frozenset(f"{target}_{flavour}" for target, flavours in CALIBRATING.items()
                               for flavour in flavours)
LITERT_FILE = "model.tflite"
ONNX_FILE = "model.onnx"
OPENVINO_FILE = "model.xml"


def savedmodel_load_instructions(signature: str) -> str:
    """The SavedModel's load line. The signature's name is the model's (or the config's): a
    Python literal here, as in every format's snippet, so that no name runs as code when a
    reviewer pastes it."""
    return f"tf.saved_model.load(path).signatures[{signature!r}]"


@dataclass(frozen=True)
class CandidateSettings:
    targets: tuple[str, ...] = ("savedmodel",)
    savedmodel_variants: tuple[str, ...] = SAVEDMODEL_VARIANTS
    litert_flavours: tuple[str, ...] = LITERT_FLAVOURS
    onnx_flavours: tuple[str, ...] = ONNX_FLAVOURS
    openvino_flavours: tuple[str, ...] = OPENVINO_FLAVOURS
    calibration_samples: int = 100

    def __post_init__(self) -> None:
        for name, given, valid in (("target", self.targets, TARGETS),
                                   ("SavedModel variant", self.savedmodel_variants,
                                    SAVEDMODEL_VARIANTS),
                                   ("LiteRT flavour", self.litert_flavours, LITERT_FLAVOURS),
                                   ("ONNX flavour", self.onnx_flavours, ONNX_FLAVOURS),
                                   ("OpenVINO flavour", self.openvino_flavours,
                                    OPENVINO_FLAVOURS)):
            unknown = [g for g in given if g not in valid]
            if unknown:
                raise InvalidInputsError(f"unknown {name} '{unknown[0]}'; valid: "
                                         f"{', '.join(valid)}")
        if not self.targets:
            raise InvalidInputsError(f"at least one target is needed; valid: "
                                     f"{', '.join(TARGETS)}")
        if self.calibration_samples < 1:
            raise InvalidInputsError(f"calibration_samples must be >= 1, got "
                                     f"{self.calibration_samples}")

    def flavours(self, target: str) -> tuple[str, ...]:
        return {"savedmodel": self.savedmodel_variants, "litert": self.litert_flavours,
                "onnx": self.onnx_flavours, "openvino": self.openvino_flavours}[target]

    def calibrating(self, target: str, flavour: str) -> bool:
        return flavour in CALIBRATING.get(target, ())

    @property
    def calibrates(self) -> bool:
        """Whether a flavour these settings build calibrates on representative inputs."""
        return any(self.calibrating(t, f) for t in self.targets for f in self.flavours(t))


def parse_targets(text: str) -> tuple[str, ...]:
    """``"savedmodel,litert"`` -> ``("savedmodel", "litert")``, checked."""
    targets = tuple(t.strip() for t in text.split(",") if t.strip())
    CandidateSettings(targets=targets)
    return targets


def planned_builds(settings: CandidateSettings) -> list[tuple[str, ...]]:
    """The candidates ``settings`` ask for, in build order, grouped by the worker process that
    builds them: the SavedModel variants one each; the flavours of one other target together,
    as they share what they are converted from (LiteRT's source with its tables filled and
    loops unrolled, tf2onnx's graph, ``convert_model``'s IR), which would otherwise be redone
    per flavour, as would each worker's TensorFlow import (~14 CPU seconds) and load of the
    model."""
    groups: list[tuple[str, ...]] = []
    if "savedmodel" in settings.targets:
        groups += [(variant,) for variant in settings.savedmodel_variants]
    for target in ("litert", "onnx", "openvino"):
        if target in settings.targets and settings.flavours(target):
            groups.append(tuple(f"{target}_{flavour}" for flavour in settings.flavours(target)))
    return groups


# Flavours that cannot be faster than another flavour built beside them, and why. On a model of
# SKIP_DOMINATED_FROM_BYTES or more on disk they are not built: each conversion there costs
# minutes and each candidate a slot in every benchmark round, for a result known in advance.
# Below, they cost seconds and are built, measured and shown as before.
DOMINATED = {
    "litert_fp16": ("litert_fp32", (
        "it runs no faster than litert_fp32 on a CPU: XNNPACK turns float16 weights into "
        "float32 when it loads the model and runs the float32 kernels, and the gate gives a "
        "near tie to the more precise")),
    "onnx_fp32": ("onnx_optimized", (
        "onnx_optimized is the same graph with the optimizations ONNX Runtime applies to "
        "onnx_fp32 at load already applied: the same run time")),
}
SKIP_DOMINATED_FROM_BYTES = WORKERS_FROM_BYTES


def dominated_skips(source: str | os.PathLike, settings: CandidateSettings) -> list[Skipped]:
    """The flavours :data:`DOMINATED` leaves out for ``source`` (none for a small model), with
    their reasons."""
    from tfopt.optimizer.model.footprint import disk_bytes

    if disk_bytes(source) < SKIP_DOMINATED_FROM_BYTES:
        return []
    planned = {label for group in planned_builds(settings) for label in group}
    return [Skipped(label, f"not built for a model of {SKIP_DOMINATED_FROM_BYTES >> 20} MB or "
                           f"more: {reason}")
            for label, (better, reason) in DOMINATED.items()
            if label in planned and better in planned]


def build_plan(source: str | os.PathLike, settings: CandidateSettings
               ) -> tuple[list[tuple[str, ...]], list[Skipped]]:
    """:func:`planned_builds` for ``source`` without the flavours :func:`dominated_skips`
    leaves out (logged), and those."""
    dominated = dominated_skips(source, settings)
    for skip in dominated:
        log.warning("candidates: %s skipped: %s", skip.label, skip.reason)
    left_out = {skip.label for skip in dominated}
    groups = [kept for group in planned_builds(settings)
              if (kept := tuple(label for label in group if label not in left_out))]
    return groups, dominated


def derive_candidates(
    source: str | os.PathLike,
    optimized: FrozenModel,
    workdir: str | os.PathLike,
    settings: CandidateSettings,
    *,
    signature: str = DEFAULT_SIGNATURE,
    calibration: Calibration | None = None,
    source_digest: str | None = None,
    in_workers: bool | None = None,
    budget: MemoryBudget | None = None,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> tuple[list[Candidate], list[Skipped]]:
    """Build every candidate ``settings`` allows under ``workdir`` (one directory each).

    ``source`` is the SavedModel the LiteRT converter reads; ``optimized`` is the float32 graph
    the SavedModel variants start from. ``calibration`` (:mod:`tfopt.optimizer.inputs.calibration`) feeds the
    int8 flavours that calibrate; without it they calibrate on inputs generated from the
    signature and are tagged ``synthetic``.

    Each candidate (each shared conversion, see :func:`planned_builds`) is built in a worker
    process of its own, one at a time (:mod:`tfopt.optimizer.candidates.worker`): a converter, a
    trace or an XLA compilation holds several times the model's size, and TensorFlow does
    not give that memory back to the system while its process lives. The worker exits once
    its artifact is on disk, so the candidates stage costs one build at a time, not their
    sum. ``in_workers=False`` builds them in this process (what a worker itself does); the
    default, ``None``, uses workers for a model of :data:`~tfopt.optimizer.model.footprint.WORKERS_FROM_BYTES` or more on disk
    (:func:`builds_in_workers`). In workers, the builds keep the memory ``budget`` (default
    :func:`~tfopt.optimizer.system.memory_budget.memory_budget`: the cgroup's limit, else the
    machine's memory): a flavour estimated not to fit beside what this process holds
    (:mod:`tfopt.optimizer.candidates.build_estimates`) is skipped before its worker starts, with
    the estimate, and the others of its group are built; a worker that crosses the budget all
    the same is stopped by the watchdog (:mod:`tfopt.optimizer.system.memory_watchdog`) and its
    candidates skipped with the figure it reached, never left to the kernel's OOM killer.
    ``policy``: what ``source`` may hold (:mod:`tfopt.optimizer.model.op_scan`), applied by every
    build that reads it, in workers too.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if settings.calibrates and calibration is None:
        from tfopt.optimizer.model.savedmodel import get_signature

        calibration = synthetic(get_signature(source, signature, policy=policy),
                                settings.calibration_samples)
    groups, dominated = build_plan(source, settings)
    if in_workers is None:
        in_workers = builds_in_workers(source)
    if not in_workers:
        labels = [label for group in groups for label in group]
        made, skipped = build_candidates(source, optimized, workdir, settings, labels,
                                         signature=signature, calibration=calibration,
                                         source_digest=source_digest, policy=policy)
        return made, dominated + skipped
    from tfopt.optimizer.candidates.build_estimates import build_bytes
    from tfopt.optimizer.candidates.worker import build_in_worker
    from tfopt.optimizer.system.memory_budget import GIB, memory_budget
    from tfopt.optimizer.system.process_tree import tree_rss_bytes

    budget = budget or memory_budget()
    made, skipped = [], list(dominated)
    for n, group in enumerate(groups, 1):
        held = tree_rss_bytes() or 0
        labels = []
        for label in group:  # a flavour that would not fit leaves the others of its group
            needs = held + build_bytes(source, [label])
            if needs <= budget.bytes:
                labels.append(label)
                continue
            reason = (f"building it in a worker needs an estimated {needs / GIB:.1f} GiB, more "
                      f"than the memory budget of {budget.describe()}")
            log.warning("candidates: %s skipped: %s", label, reason)
            skipped.append(Skipped(label, reason))
        if not labels:
            continue
        log.info("candidates: [%d/%d] %s (worker process, estimated %.2f GiB beside %.2f "
                 "GiB held)", n, len(groups), ", ".join(labels),
                 build_bytes(source, labels) / GIB, held / GIB)
        # a worker holds what its job carries: the feeds only where a flavour calibrates
        built, refused = build_in_worker(
            source, optimized if any(lb in SAVEDMODEL_VARIANTS for lb in labels) else None,
            workdir, settings, labels, signature=signature,
            calibration=calibration if any(lb in CALIBRATING_LABELS for lb in labels) else None,
            source_digest=source_digest, policy=policy, budget=budget)
        made += built
        skipped += refused
    return made, skipped


def build_candidates(
    source: str | os.PathLike,
    optimized: FrozenModel | None,
    workdir: Path,
    settings: CandidateSettings,
    labels: Sequence[str],
    *,
    signature: str,
    calibration: Calibration | None,
    source_digest: str | None,
    policy: ScanPolicy = DEFAULT_POLICY,
    measure_flavours: bool = False,
) -> tuple[list[Candidate], list[Skipped]]:
    """Build the candidates named ``labels`` here, in this process; a refused one is skipped
    with its one-line reason. ``source`` is read under ``policy``. ``measure_flavours`` (a
    worker's) logs each flavour's peak, read from the kernel's high-water mark reset before
    it: exact where a sampling thread would be starved, as a converter holding the GIL for
    tens of seconds starves one."""
    from tfopt.optimizer.benchmark.memory import read_rss, reset_peak

    wanted = set(labels)
    makers: list[tuple[str, Callable[[Path], Candidate]]] = []
    if "savedmodel" in settings.targets:
        for variant in settings.savedmodel_variants:
            if variant in wanted:
                makers.append((variant, _savedmodel_maker(variant, optimized, signature)))
    if "litert" in settings.targets and any(lb.startswith("litert_") for lb in wanted):
        converted_from = _litert_source(Path(source), workdir, signature, policy)
        for flavour in settings.litert_flavours:
            if f"litert_{flavour}" in wanted:
                makers.append((f"litert_{flavour}", _litert_maker(
                    flavour, converted_from, signature, calibration,
                    settings.calibration_samples, source_digest, policy)))
    for target in ("onnx", "openvino"):
        flavours = [f for f in settings.flavours(target) if f"{target}_{f}" in wanted]
        if target in settings.targets and flavours:
            make = _converter(target, Path(source), signature, calibration,
                              settings.calibration_samples, source_digest, policy)
            for flavour in flavours:
                makers.append((f"{target}_{flavour}", functools.partial(make, flavour)))
    made, skipped = [], []
    for n, (label, make) in enumerate(makers, 1):
        log.info("candidates: [%d/%d] %s", n, len(makers), label)
        # a worker resets its peak for each flavour: the figures behind build_estimates
        peak_reset = measure_flavours and reset_peak()
        try:
            made.append(make(workdir / label))
        except TfoptError as exc:
            reason = first_line(exc)
            log.warning("candidates: %s skipped: %s", label, reason)
            skipped.append(Skipped(label, reason))
        if peak_reset and (reading := read_rss()) is not None:
            log.info("candidates: %s: the worker peaked at %.2f GiB resident while it was "
                     "built%s", label, reading.peak_bytes / 2**30,
                     " (with the conversion its target's flavours share)"
                     if n == 1 and len(makers) > 1 else "")
    return made, skipped


def _savedmodel_maker(variant: str, optimized: FrozenModel, signature: str):
    def make(dst: Path) -> Candidate:
        from tfopt.optimizer.model.export import write_saved_model
        from tfopt.optimizer.optimize.worker import full_model

        # optimized is an outline when it was optimized in a worker: the full model read from
        # its file is held by the build alone, which lets it go once retyped or traced
        if variant == "bf16":
            from tfopt.optimizer.candidates.bf16 import BF16_PROVENANCE, bf16_mixed_precision

            retyped = bf16_mixed_precision(full_model(optimized))
            write_saved_model(retyped, dst, overwrite=True, metadata=BF16_PROVENANCE)
            runtime = "tensorflow"
        else:
            from tfopt.optimizer.candidates.xla import write_xla_saved_model

            write_xla_saved_model(full_model(optimized), dst, overwrite=True)
            runtime = "tensorflow+xla"
        how = savedmodel_load_instructions(signature)
        if variant == "xla":
            how += "  # TF Serving: --xla_cpu_compilation_enabled=true"
        return Candidate(label=variant, target="savedmodel", variant=variant,
                         format="savedmodel", runtime=runtime, path=str(dst), how_to_load=how)
    return make


def _litert_source(source: Path, workdir: Path, signature: str, policy: ScanPolicy
                   ) -> Callable[[], LiteRTSource]:
    """What the converter reads, made once, when the first LiteRT flavour needs it: the source
    with its lookup tables filled from constants (:mod:`tfopt.optimizer.candidates.litert.constant_tables`), then
    with its static loops unrolled (:mod:`tfopt.optimizer.candidates.litert.unrolled_source`). Its failure skips
    every flavour."""
    made: list[LiteRTSource | TfoptError] = []

    def source_for_litert() -> LiteRTSource:
        if not made:
            from tfopt.optimizer.candidates.litert.constant_tables import (
                litert_source as with_constant_tables,
            )
            from tfopt.optimizer.candidates.litert.unrolled_source import (
                litert_source as with_loops_unrolled,
            )

            try:
                tables_filled = with_constant_tables(source, workdir, signature, policy=policy)
                made.append(with_loops_unrolled(tables_filled, signature, workdir,
                                                policy=policy))
            except TfoptError as exc:
                made.append(exc)
        if isinstance(made[0], TfoptError):
            raise made[0]
        return made[0]
    return source_for_litert


def _smoke_run(path: Path, signature: str) -> None:
    """Run the converted model once on generated inputs; one line when it cannot run."""
    from tfopt.optimizer.candidates.litert.convert import LiteRTConversionError
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.runtime import load_runner

    runner = load_runner(path, signature)
    try:
        runner(make_inputs(runner.signature, batch_size=1, seed=0))
    except (RuntimeError, ValueError) as exc:
        raise LiteRTConversionError(f"the converted model does not run in ai-edge-litert: "
                                    f"{first_line(exc)}") from None
    finally:
        runner.close()


def _check_calibration_inputs(feeds: Sequence[Mapping[str, np.ndarray]]) -> None:
    """TFLite's calibrator feeds numeric tensors only: given a string input it fails with
    "basic_string::_M_create" (TF 2.21), so a model with one gets no full_int8 candidate."""
    from tfopt.optimizer.candidates.litert.convert import LiteRTConversionError

    for key, value in feeds[0].items():
        if np.asarray(value).dtype.kind in "OSU":
            raise LiteRTConversionError(f"full_int8 needs calibration, and TFLite's calibrator "
                                        f"cannot feed string input '{key}'")


def _litert_maker(flavour: str, converted_from: Callable[[], LiteRTSource], signature: str,
                  calibration: Calibration | None, samples: int, source_digest: str | None,
                  policy: ScanPolicy):
    calibrated = calibration if flavour == "full_int8" else None

    def make(dst: Path) -> Candidate:
        from tfopt.optimizer.candidates.litert.convert import (
            LiteRTConversionError,
            convert_to_litert,
        )
        from tfopt.optimizer.files.atomic import atomic_directory

        if calibrated is not None:
            _check_calibration_inputs(calibrated.feeds)
        source = converted_from()
        with atomic_directory(dst, overwrite=True) as staging:
            staging.mkdir(parents=True, exist_ok=True)
            try:
                converted = convert_to_litert(
                    source.path, staging / LITERT_FILE, flavour, signature=signature,
                    representative_data=calibrated.feeds if calibrated else None,
                    calibration_samples=samples,
                    calibration_source=calibrated.source if calibrated else None,
                    source_digest=source_digest, policy=policy)
            except LiteRTConversionError as exc:
                if source.kept_loops is None:
                    raise
                raise LiteRTConversionError(
                    f"{first_line(exc)} (while loops left as loops: {source.kept_loops})",
                    details=exc.details) from exc
            _smoke_run(staging / LITERT_FILE, signature)
        snippet = converted.manifest.to_dict()["load"]["python"]
        return Candidate(label=f"litert_{flavour}", target="litert", variant=flavour,
                         format="tflite", runtime="ai-edge-litert",
                         path=str(dst / LITERT_FILE), how_to_load=snippet,
                         calibration=calibrated.tag if calibrated else None)
    return make


def _converter(target: str, source: Path, signature: str, calibration: Calibration | None,
               samples: int, source_digest: str | None, policy: ScanPolicy) -> Callable:
    """``make(flavour, dst)``: one flavour of ``target`` (onnx or openvino) built into the
    candidate directory ``dst``; every flavour shares one conversion of the source."""
    if target == "onnx":
        from tfopt.optimizer.candidates.onnx.convert import OnnxExport as Export
        from tfopt.optimizer.candidates.onnx.convert import convert_to_onnx as convert
        file_name, runtime = ONNX_FILE, "onnxruntime"
    else:
        from tfopt.optimizer.candidates.openvino.convert import OpenVINOExport as Export
        from tfopt.optimizer.candidates.openvino.convert import convert_to_openvino as convert
        file_name, runtime = OPENVINO_FILE, "openvino"
    export = Export(source, signature)

    def make(flavour: str, dst: Path) -> Candidate:
        from tfopt.optimizer.files.atomic import atomic_directory

        with atomic_directory(dst, overwrite=True) as staging:
            staging.mkdir(parents=True, exist_ok=True)
            converted = convert(source, staging / file_name, flavour, signature=signature,
                                calibration=calibration, calibration_samples=samples,
                                source_digest=source_digest, export=export, policy=policy)
        calibrated = calibration is not None and flavour in CALIBRATING[target]
        return Candidate(label=f"{target}_{flavour}", target=target, variant=flavour,
                         format=target, runtime=runtime, path=str(dst / file_name),
                         how_to_load=converted.sidecar.load_python,
                         calibration=calibration.tag if calibrated else None)
    return make
