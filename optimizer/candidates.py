"""More candidates from one model, each tagged with the runtime and format it needs.

The optimized float32 SavedModel (the recipe or search result) is one candidate; from it and the
source this module derives the others the config's ``targets`` allow:

``savedmodel`` (TF Serving, ``tf.saved_model.load``)
    ``bf16``: oneDNN bfloat16 automatic mixed precision baked into the graph, only on a CPU with
    native bfloat16 (:mod:`optimizer.bf16`); ``xla``: the graph as one function XLA must
    compile (:mod:`optimizer.xla`; TF Serving needs ``--xla_cpu_compilation_enabled=true``).
``litert`` (the ``ai-edge-litert`` interpreter with XNNPACK)
    ``litert_fp32``, ``litert_fp16`` (float16 weights), ``litert_dynamic_int8`` (dynamic-range
    int8) and ``litert_full_int8`` (int8 calibrated on representative inputs drawn from the eval
    data), converted from the source SavedModel by :mod:`optimizer.litert.convert`; from the
    frozen source with its static loops unrolled when it has some (a Keras LSTM or GRU, which
    the converter cannot lower as a loop: :mod:`optimizer.litert.unrolled_source`).

A candidate that cannot be built here (no native bfloat16, an op XLA or the LiteRT converter
refuses, no calibration data) is *skipped* with its one-line reason, never fatal: the others
still go to the benchmark, and the gate picks the fastest one inside the accuracy budget. None
of these candidates is held to the float rewrite's equivalence bound; their accuracy is what the
evaluation measures and the gate's budget bounds.

Each LiteRT candidate is a directory holding ``model.tflite`` and its sidecar
``model.tflite.json`` (what it is, how to load it), so that every candidate is a directory to
store and publish; :attr:`Candidate.path` names the file a runner loads.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from optimizer.calibration import Calibration
from optimizer.errors import InvalidInputsError, TfoptError, first_line
from optimizer.frozen import FrozenModel
from optimizer.litert.unrolled_source import LiteRTSource, litert_source
from optimizer.savedmodel import DEFAULT_SIGNATURE

log = logging.getLogger(__name__)

TARGETS = ("savedmodel", "litert")
SAVEDMODEL_VARIANTS = ("bf16", "xla")
LITERT_FLAVOURS = ("fp32", "fp16", "dynamic_int8", "full_int8")
LITERT_FILE = "model.tflite"


def savedmodel_load_instructions(signature: str) -> str:
    return f'tf.saved_model.load(path).signatures["{signature}"]'


@dataclass(frozen=True)
class Candidate:
    """A model to measure: what it is, where it is, what runs it."""

    label: str
    target: str  # one of TARGETS
    variant: str  # fp32, bf16, xla, or the LiteRT flavour
    format: str  # savedmodel | tflite
    runtime: str  # tensorflow | tensorflow+xla | ai-edge-litert
    path: str  # the SavedModel directory, or the .tflite file
    how_to_load: str

    @property
    def artifact_dir(self) -> Path:
        """The directory that holds everything of this candidate (what gets published)."""
        path = Path(self.path)
        return path.parent if self.format == "tflite" else path

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Skipped:
    label: str
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CandidateSettings:
    targets: tuple[str, ...] = ("savedmodel",)
    savedmodel_variants: tuple[str, ...] = SAVEDMODEL_VARIANTS
    litert_flavours: tuple[str, ...] = LITERT_FLAVOURS
    calibration_samples: int = 100

    def __post_init__(self) -> None:
        for name, given, valid in (("target", self.targets, TARGETS),
                                   ("SavedModel variant", self.savedmodel_variants,
                                    SAVEDMODEL_VARIANTS),
                                   ("LiteRT flavour", self.litert_flavours, LITERT_FLAVOURS)):
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


def parse_targets(text: str) -> tuple[str, ...]:
    """``"savedmodel,litert"`` -> ``("savedmodel", "litert")``, checked."""
    targets = tuple(t.strip() for t in text.split(",") if t.strip())
    CandidateSettings(targets=targets)
    return targets


def derive_candidates(
    source: str | os.PathLike,
    optimized: FrozenModel,
    workdir: str | os.PathLike,
    settings: CandidateSettings,
    *,
    signature: str = DEFAULT_SIGNATURE,
    calibration: Calibration | None = None,
    source_digest: str | None = None,
) -> tuple[list[Candidate], list[Skipped]]:
    """Build every candidate ``settings`` allows under ``workdir`` (one directory each).

    ``source`` is the SavedModel the LiteRT converter reads; ``optimized`` is the float32 graph
    the SavedModel variants start from. ``calibration`` (:mod:`optimizer.calibration`) is
    needed by the int8 flavours that calibrate; without it they are skipped.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    makers: list[tuple[str, Callable[[Path], Candidate]]] = []
    if "savedmodel" in settings.targets:
        for variant in settings.savedmodel_variants:
            makers.append((variant, _savedmodel_maker(variant, optimized, signature)))
    if "litert" in settings.targets:
        feeds = list(calibration.feeds) if calibration is not None else None
        converted_from = functools.cache(lambda: litert_source(source, signature, workdir))
        for flavour in settings.litert_flavours:
            makers.append((f"litert_{flavour}", _litert_maker(
                flavour, converted_from, signature, feeds, settings.calibration_samples,
                source_digest)))
    made, skipped = [], []
    for n, (label, make) in enumerate(makers, 1):
        log.info("candidates: [%d/%d] %s", n, len(makers), label)
        try:
            made.append(make(workdir / label))
        except TfoptError as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning("candidates: %s skipped: %s", label, reason)
            skipped.append(Skipped(label, reason))
    return made, skipped


def _savedmodel_maker(variant: str, optimized: FrozenModel, signature: str):
    def make(dst: Path) -> Candidate:
        from optimizer.export import write_saved_model

        if variant == "bf16":
            from optimizer.bf16 import BF16_PROVENANCE, bf16_mixed_precision

            write_saved_model(bf16_mixed_precision(optimized), dst, overwrite=True,
                              metadata=BF16_PROVENANCE)
            runtime = "tensorflow"
        else:
            from optimizer.xla import write_xla_saved_model

            write_xla_saved_model(optimized, dst, overwrite=True)
            runtime = "tensorflow+xla"
        how = savedmodel_load_instructions(signature)
        if variant == "xla":
            how += "  # TF Serving: --xla_cpu_compilation_enabled=true"
        return Candidate(label=variant, target="savedmodel", variant=variant,
                         format="savedmodel", runtime=runtime, path=str(dst), how_to_load=how)
    return make


def _litert_maker(flavour: str, converted_from: Callable[[], LiteRTSource], signature: str,
                  feeds: Sequence[Mapping[str, np.ndarray]] | None, samples: int,
                  source_digest: str | None):
    def make(dst: Path) -> Candidate:
        from optimizer.atomic import atomic_directory
        from optimizer.litert.convert import LiteRTConversionError, convert_to_litert

        if flavour == "full_int8" and not feeds:
            raise InvalidInputsError("full_int8 needs calibration inputs drawn from the eval "
                                     "data; none were given")
        source = converted_from()
        with atomic_directory(dst, overwrite=True) as staging:
            staging.mkdir(parents=True, exist_ok=True)
            try:
                converted = convert_to_litert(
                    source.path, staging / LITERT_FILE, flavour, signature=signature,
                    representative_data=feeds, calibration_samples=samples,
                    source_digest=source_digest)
            except LiteRTConversionError as exc:
                if source.kept_loops is None:
                    raise
                raise LiteRTConversionError(
                    f"{first_line(exc)} (while loops left as loops: {source.kept_loops})",
                    details=exc.details) from exc
        snippet = converted.manifest.to_dict()["load"]["python"]
        return Candidate(label=f"litert_{flavour}", target="litert", variant=flavour,
                         format="tflite", runtime="ai-edge-litert",
                         path=str(dst / LITERT_FILE), how_to_load=snippet)
    return make
