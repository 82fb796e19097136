"""Mixed-precision candidates: search which layers to keep in float, build the answer as a
candidate the benchmark, the evaluation and the gate treat like every other.

:func:`mixed_onnx_candidate` runs on ONNX Runtime's static int8 (``onnx_mixed_int8``): the
table is measured once (:func:`optimizer.search.precision.onnx_runtime.build_table`), the
search (:mod:`optimizer.search.precision.search`) proposes its few best assignments, each is
built and measured end to end (its error on the same data, its p50 at batch 1 on one thread,
timed interleaved in blocks with the others), and the fastest inside the budget is written as
the candidate, its float layers in :attr:`Candidate.float_layers` and its sidecar's converter
options (``float_nodes``). :func:`should_search` is the ``auto`` rule: search only when uniform
int8 breaks the budget and real data (labelled, or calibration inputs) exist.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from optimizer.candidates.candidate import Candidate
from optimizer.inputs.calibration import Calibration
from optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from optimizer.search.precision.search import Measured, PrecisionResult, search_precision
from optimizer.search.precision.settings import PrecisionSearchSettings
from optimizer.search.precision.table import PrecisionTable

log = logging.getLogger(__name__)

LABEL = "onnx_mixed_int8"
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


def _measure(model, meter, reference: Path):
    """``measure(assignments)``: each built, its error, and its p50 timed interleaved."""
    from optimizer.benchmark.interleaved import time_interleaved
    from optimizer.search.precision.onnx_runtime import _session

    def measure(assignments) -> list[Measured]:
        paths = [model.build(float_layers=sorted(a)) for a in assignments]
        errors = [meter.error(p) for p in paths]
        feeds = {k: v[:1] for k, v in meter.x.items()}
        calls = {str(i): functools.partial(_session(path).run, None, feeds)
                 for i, path in enumerate(paths)}
        samples = time_interleaved(calls, warmup=10, min_runs=20, min_seconds=PROPOSAL_SECONDS,
                                   rotate_order=True, block_size=10)
        return [Measured(samples[str(i)].p50, errors[i])
                for i in range(len(paths))]
    return measure


def mixed_onnx_candidate(source: str | os.PathLike, workdir: str | os.PathLike,
                         settings: PrecisionSearchSettings, max_error: float, *,
                         signature: str, calibration: Calibration, eval_data=None,
                         metric: str = "top1", samples: int = 100,
                         source_digest: str | None = None, export=None,
                         cost_cache: str | os.PathLike | None = None,
                         policy: ScanPolicy = DEFAULT_POLICY,
                         built: Mapping[str, str] | None = None) -> PrecisionOutcome:
    """Search (``settings.mode``; ``auto`` decided here from uniform int8's measured error) and,
    when an assignment measures inside ``max_error``, build ``onnx_mixed_int8`` under
    ``workdir``. ``built``: label -> model file of the ONNX candidates already built; with
    ``onnx_static_int8`` and a float one among them, ``auto`` reads uniform int8's error from
    those and, when it passes, converts nothing."""
    from optimizer.candidates.onnx.convert import OnnxExport, convert_to_onnx
    from optimizer.files.atomic import atomic_directory
    from optimizer.model.savedmodel import get_signature
    from optimizer.search.precision.onnx_runtime import (
        ErrorMeter,
        OnnxLayerCosts,
        OnnxPrecisionModel,
        build_table,
    )

    started = time.perf_counter()
    workdir = Path(workdir)
    labels = eval_data.y if eval_data is not None else None
    strategy, why = should_search(settings.mode, None, max_error, calibration, labels is not None)
    if strategy == "off":
        log.info("precision search off: %s", why)
        return PrecisionOutcome("off", None, None, reason=why)
    info = get_signature(source, signature, policy=policy)
    x = _inputs(info, calibration, eval_data.x if eval_data is not None else None)
    uniform = None
    if settings.mode == "auto" and built:
        # uniform int8's error from the candidates already built: no conversion when it passes
        float_model = built.get("onnx_optimized") or built.get("onnx_fp32")
        if float_model and built.get("onnx_static_int8"):
            uniform = ErrorMeter(Path(float_model), x, labels, metric).error(
                Path(built["onnx_static_int8"]))
            strategy, why = should_search(settings.mode, uniform, max_error, calibration,
                                          labels is not None)
            if strategy == "off":
                log.info("precision search off: %s", why)
                return PrecisionOutcome("off", None, None, uniform_int8_error=uniform,
                                        search_seconds=time.perf_counter() - started,
                                        reason=why)
    export = export or OnnxExport(source, signature)
    model = OnnxPrecisionModel(export.pre_processed_bytes(), calibration.feeds[:samples],
                               workdir / "precision_search")
    meter = ErrorMeter(model.prepared, x, labels, metric)
    uniform_int8 = model.build()
    uniform = meter.error(uniform_int8)
    strategy, why = should_search(settings.mode, uniform, max_error, calibration,
                                  labels is not None)
    if strategy == "off":
        log.info("precision search off: %s", why)
        return PrecisionOutcome("off", None, None, search_seconds=time.perf_counter() - started,
                                uniform_int8_error=uniform, reason=why)
    log.info("precision search %s: %s (uniform int8 error %.4f, budget %.4f)", strategy, why,
             uniform, max_error)
    table_started = time.perf_counter()
    table = build_table(model, meter, OnnxLayerCosts(cost_cache),
                        _call_seconds(uniform_int8, meter))
    table_seconds = time.perf_counter() - table_started
    result = search_precision(table, strategy, max_error, _measure(model, meter, model.prepared),
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
    else:
        dst = workdir / LABEL
        with atomic_directory(dst, overwrite=True) as staging:
            staging.mkdir(parents=True, exist_ok=True)
            converted = convert_to_onnx(
                source, staging / "model.onnx", "mixed_int8", signature=signature,
                calibration=calibration, calibration_samples=samples,
                source_digest=source_digest, export=export, policy=policy,
                float_nodes=result.float_layers)
        outcome.candidate = Candidate(
            label=LABEL, target="onnx", variant="mixed_int8", format="onnx",
            runtime="onnxruntime", path=str(dst / "model.onnx"),
            how_to_load=converted.sidecar.load_python, calibration=calibration.tag,
            float_layers=tuple(result.float_layers))
    outcome.search_seconds = time.perf_counter() - started
    return outcome


def _call_seconds(path: Path, meter) -> float:
    """A model's call at batch 1 on one thread, fastest of a few repeats."""
    from optimizer.search.precision.onnx_runtime import _session

    session = _session(path)
    feeds = {k: v[:1] for k, v in meter.x.items()}
    for _ in range(20):
        session.run(None, feeds)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(100):
            session.run(None, feeds)
        best = min(best, (time.perf_counter() - started) / 100)
    return best
