"""Mixed-precision candidates: search which layers to keep in float, build the answer as a
candidate the benchmark, the evaluation and the gate treat like every other.

:func:`mixed_candidate` runs on ONNX Runtime's static int8 (``onnx_mixed_int8``), LiteRT's
full int8 (``litert_mixed_int8``) or OpenVINO's NNCF int8 (``openvino_mixed_int8``): the table
is measured once (:func:`tfopt.optimizer.search.precision.measure.build_table`), the search
(:mod:`tfopt.optimizer.search.precision.search`) proposes its few best assignments, each is built
and measured end to end (its error on the same data, its p50 at batch 1 on one thread,
timed interleaved in blocks with the others), and the fastest inside the budget is written as
the candidate, its float layers in :attr:`Candidate.float_layers` and its sidecar's converter
options (``float_nodes``). :func:`should_search` is the ``auto`` rule: search only when uniform
int8 breaks the budget and real data (labelled, or calibration inputs) exist.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfopt.optimizer.candidates.candidate import Candidate
from tfopt.optimizer.inputs.calibration import Calibration
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.search.precision.search import Measured, PrecisionResult, search_precision
from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings
from tfopt.optimizer.search.precision.table import PrecisionTable

log = logging.getLogger(__name__)

PROPOSAL_SECONDS = 1.5  # end-to-end timing of the proposals, interleaved


@dataclass
class PrecisionOutcome:
    """What the search did for one model: the table, the result (its trace), and timings."""

    strategy: str
    table: PrecisionTable | None
    result: PrecisionResult | None
    table_seconds: float = 0.0
    search_seconds: float = 0.0  # table + search + building and measuring the proposals
    uniform_int8_error: float | None = None
    reason: str = ""  # why no search ran, or why no candidate came of it
    candidate: Candidate | None = field(default=None)

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "reason": self.reason,
                "table_seconds": self.table_seconds, "search_seconds": self.search_seconds,
                "uniform_int8_error": self.uniform_int8_error,
                "table": self.table.to_dict() if self.table else None,
                "result": self.result.to_dict() if self.result else None,
                "candidate": self.candidate.label if self.candidate else None,
                "float_layers": list(self.candidate.float_layers) if self.candidate else []}


def should_search(mode: str, uniform_int8_error: float | None, max_error: float,
                  calibration: Calibration | None, labelled: bool) -> tuple[str, str]:
    """(the strategy to run, or "off"; why). ``auto`` runs ``relaxed`` only when uniform int8
    was measured outside the budget and the data is real (labelled or calibration inputs): a
    model where uniform int8 passes pays nothing."""
    if mode in ("off", "greedy", "relaxed"):
        return mode, f"precision search {mode} (asked)"
    if not labelled and (calibration is None or calibration.synthetic):
        return "off", "no labelled or calibration data: sensitivity would be measured on noise"
    if uniform_int8_error is not None and uniform_int8_error <= max_error:
        return "off", (f"uniform int8 is inside the budget (error {uniform_int8_error:.4f} <= "
                       f"{max_error:.4f})")
    return "relaxed", "uniform int8 breaks the accuracy budget"


def _inputs(signature, calibration: Calibration | None, eval_x: np.ndarray | None) -> dict:
    if eval_x is not None:
        spec = signature.inputs[0]
        return {spec.key: np.asarray(eval_x).astype(spec.numpy_dtype, copy=False)}
    return {key: np.concatenate([np.asarray(f[key]) for f in calibration.feeds])
            for key in signature.input_keys}


def _measure(model, meter):
    """``measure(assignments)``: each built, its error, and its p50 timed interleaved."""
    from tfopt.optimizer.search.precision.measure import p50_seconds

    def measure(assignments) -> list[Measured]:
        paths = [model.build(float_layers=sorted(a)) for a in assignments]
        errors = [meter.error(p) for p in paths]
        seconds = p50_seconds(paths, model.format, meter.signature, meter.x, PROPOSAL_SECONDS)
        return [Measured(s, e) for s, e in zip(seconds, errors)]
    return measure


# target -> (label, the uniform int8 flavour, the float flavours to read its error against)
TARGETS = {"onnx": ("onnx_mixed_int8", "onnx_static_int8", ("onnx_optimized", "onnx_fp32")),
           "litert": ("litert_mixed_int8", "litert_full_int8", ("litert_fp32",)),
           "openvino": ("openvino_mixed_int8", "openvino_int8", ("openvino_fp32",))}
FORMATS = {"onnx": "onnx", "litert": "tflite", "openvino": "openvino"}  # target -> model format


def searched_targets(targets, mode: str) -> list[str]:
    """The targets among ``targets`` whose mixed int8 candidate is searched (all that have one,
    in :data:`TARGETS`' order), none when the search ``mode`` is off."""
    return [] if mode == "off" else [t for t in TARGETS if t in targets]


def mixed_candidate(source: str | os.PathLike, workdir: str | os.PathLike,
                    settings: PrecisionSearchSettings, max_error: float, *,
                    signature: str, calibration: Calibration, eval_data=None,
                    metric: str = "top1", samples: int = 100,
                    source_digest: str | None = None, export=None,
                    cost_cache: str | os.PathLike | None = None,
                    policy: ScanPolicy = DEFAULT_POLICY,
                    built: Mapping[str, str] | None = None,
                    target: str = "onnx") -> PrecisionOutcome:
    """Search (``settings.mode``; ``auto`` decided here from uniform int8's measured error) and,
    when an assignment measures inside ``max_error``, build ``onnx_mixed_int8`` (``target``
    ``onnx``: ONNX Runtime static int8, ``nodes_to_exclude``), ``litert_mixed_int8``
    (``litert``: LiteRT full int8, ``denylisted_nodes``) or ``openvino_mixed_int8``
    (``openvino``: NNCF int8, ``IgnoredScope``) under ``workdir``. ``built``: label ->
    model file of the candidates already built; with the target's uniform int8 and a float
    one among them, ``auto`` reads uniform int8's error from those and, when it passes,
    converts nothing. ``export``: a tf2onnx conversion (onnx) or an OpenVINO conversion
    (openvino) of the source to share."""
    from tfopt.optimizer.files.atomic import atomic_directory
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.search.precision.measure import (
        EndToEndLayerCosts,
        ErrorMeter,
        build_table,
        p50_seconds,
    )

    label, uniform_label, float_labels = TARGETS[target]
    started = time.perf_counter()
    workdir = Path(workdir)
    labels = eval_data.y if eval_data is not None else None

    def off(why: str, uniform: float | None = None) -> PrecisionOutcome:
        log.info("precision search off: %s", why)
        return PrecisionOutcome("off", None, None, uniform_int8_error=uniform,
                                search_seconds=time.perf_counter() - started, reason=why)

    strategy, why = should_search(settings.mode, None, max_error, calibration, labels is not None)
    if strategy == "off":
        return off(why)
    strings = [key for key, value in calibration.feeds[0].items()
               if np.asarray(value).dtype.kind in "OSU"] if calibration and calibration.feeds else []
    if strings:
        # int8 calibration feeds numbers only: TFLite's calibrator crashes the process on a
        # string input rather than raising, so the search must not start
        return off(f"int8 calibration cannot feed string input '{strings[0]}'")
    info = get_signature(source, signature, policy=policy)
    x = _inputs(info, calibration, eval_data.x if eval_data is not None else None)
    fmt = FORMATS[target]
    float_model = next((built[f] for f in float_labels if built and f in built), None)
    if settings.mode == "auto" and float_model and uniform_label in built:
        # uniform int8's error from the candidates already built: no conversion when it passes
        uniform = ErrorMeter(Path(float_model), fmt, signature, x, labels, metric).error(
            Path(built[uniform_label]))
        strategy, why = should_search(settings.mode, uniform, max_error, calibration,
                                      labels is not None)
        if strategy == "off":
            return off(why, uniform)
    feeds = calibration.feeds[:samples]
    if target == "onnx":
        from tfopt.optimizer.candidates.onnx.convert import OnnxExport
        from tfopt.optimizer.search.precision.onnx_runtime import OnnxLayerCosts, OnnxPrecisionModel

        export = export or OnnxExport(source, signature)
        model = OnnxPrecisionModel(export.pre_processed_bytes(), feeds,
                                   workdir / f"{label}_search")
        costs = OnnxLayerCosts(cost_cache)
    else:
        costs = EndToEndLayerCosts(lambda paths: p50_seconds(paths, fmt, signature, x,
                                                             PROPOSAL_SECONDS))
        if target == "litert":
            from tfopt.optimizer.search.precision.litert_runtime import LiteRTPrecisionModel

            model = LiteRTPrecisionModel(Path(source), signature, feeds,
                                         workdir / f"{label}_search")
        else:
            from tfopt.optimizer.candidates.openvino.convert import OpenVINOExport
            from tfopt.optimizer.search.precision.openvino_runtime import OpenVINOPrecisionModel

            export = export or OpenVINOExport(source, signature)
            model = OpenVINOPrecisionModel(export, signature, feeds,
                                           workdir / f"{label}_search")
    meter = ErrorMeter(model.prepared, fmt, signature, x, labels, metric)
    uniform_int8 = model.build()
    uniform = meter.error(uniform_int8)
    strategy, why = should_search(settings.mode, uniform, max_error, calibration,
                                  labels is not None)
    if strategy == "off":
        return off(why, uniform)
    log.info("precision search %s (%s): %s (uniform int8 error %.4f, budget %.4f)", strategy,
             label, why, uniform, max_error)
    table_started = time.perf_counter()
    table = build_table(model, meter, costs,
                        p50_seconds([uniform_int8], fmt, signature, x, PROPOSAL_SECONDS)[0])
    table_seconds = time.perf_counter() - table_started
    result = search_precision(table, strategy, max_error, _measure(model, meter),
                              alpha=settings.alpha, budget=settings.budget,
                              time_budget=settings.time_budget, keep=settings.measure_top)
    outcome = PrecisionOutcome(strategy, table, result, table_seconds=table_seconds,
                               uniform_int8_error=uniform, reason=why)
    for tried in result.tried:
        log.info("precision search %s: float %s: predicted %.1f us, error %.4f; measured %.1f "
                 "us, error %.4f%s", strategy, list(tried.float_layers) or "none",
                 tried.predicted_seconds * 1e6, tried.predicted_error,
                 tried.measured_seconds * 1e6, tried.measured_error,
                 "" if tried.within_budget else " (outside the budget)")
    if result.chosen is None:
        outcome.reason = "no assignment measured inside the accuracy budget"
        outcome.search_seconds = time.perf_counter() - started
        return outcome
    dst = workdir / label
    with atomic_directory(dst, overwrite=True) as staging:
        staging.mkdir(parents=True, exist_ok=True)
        if target in ("onnx", "openvino"):
            # the two share their converters' interface and their sidecars
            if target == "onnx":
                from tfopt.optimizer.candidates.onnx.convert import convert_to_onnx as convert
            else:
                from tfopt.optimizer.candidates.openvino.convert import (
                    convert_to_openvino as convert,
                )
            path = staging / ("model.onnx" if target == "onnx" else "model.xml")
            how = convert(
                source, path, "mixed_int8", signature=signature, calibration=calibration,
                calibration_samples=samples, source_digest=source_digest, export=export,
                policy=policy, float_nodes=result.float_layers).sidecar.load_python
            runtime = "onnxruntime" if target == "onnx" else "openvino"
        else:
            from tfopt.optimizer.candidates.litert.convert import convert_to_litert

            path = staging / "model.tflite"
            converted = convert_to_litert(
                source, path, "mixed_int8", signature=signature,
                representative_data=calibration.feeds, calibration_samples=samples,
                calibration_source=calibration.source, source_digest=source_digest,
                policy=policy, float_nodes=result.float_layers)
            how = converted.manifest.to_dict()["load"]["python"]
            runtime = "ai-edge-litert"
    outcome.candidate = Candidate(
        label=label, target=target, variant="mixed_int8", format=fmt, runtime=runtime,
        path=str(dst / path.name), how_to_load=how, calibration=calibration.tag,
        float_layers=tuple(result.float_layers))
    outcome.search_seconds = time.perf_counter() - started
    return outcome
