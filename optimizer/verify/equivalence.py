"""Do two models compute the same thing? Run both on the same inputs and report the gap.

In the spirit of onnx-simplifier's checker: inputs come from the caller or are generated from
the signature, both models run on each batch, and the report carries the largest differences.

- ``max_abs_diff``: the largest ``|a - b|`` over every element of every output.
- ``max_rel_diff``: ``max |a - b| / max |a|`` per output (relative to the output's scale, so
  near-zero elements do not blow it up), the largest over outputs.
- ``top1_agreement``: for outputs shaped ``[..., classes]`` with more than one class, the share
  of positions whose argmax is the same; the lowest over such outputs, ``None`` when there are none.
- ``nan_values`` / ``inf_values``: values the candidate answers NaN / ±Inf where the original's
  are finite; ``original_nan_values`` / ``original_inf_values``: the original's own.

NaN never equals NaN here (:mod:`tfopt.optimizer.verify.finite`): a NaN on either side is an infinite
difference, and a row holding NaN agrees with nothing.

Outputs that are not numbers (strings, from a table mapping ids back to tokens) either match
element for element (differences 0) or do not (infinite).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.errors import EquivalenceError
from tfopt.optimizer.inputs.generated import infer_int_ranges, make_inputs
from tfopt.optimizer.inputs.vocabulary import infer_vocabularies
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.model.signature import contract_difference
from tfopt.optimizer.records import JsonRecord, default_of
from tfopt.optimizer.runtime import Model, ModelRunner, load_runner
from tfopt.optimizer.system.free_memory import return_freed_memory
from tfopt.optimizer.verify.finite import (
    NO_CLASS,
    count_nonfinite,
    nonfinite_counts,
    nonfinite_text,
    top1_predictions,
)
from tfopt.optimizer.verify.tolerance import Tolerance

DEFAULT_ATOL = default_of(Tolerance, "atol")  # one bound for every check: the tolerance's


@dataclass(frozen=True)
class OutputDiff:
    key: str
    max_abs_diff: float
    max_rel_diff: float
    top1_agreement: float | None


@dataclass(frozen=True)
class EquivalenceReport(JsonRecord):
    max_abs_diff: float
    max_rel_diff: float
    top1_agreement: float | None
    outputs: tuple[OutputDiff, ...]
    batches: int
    nan_values: int = 0
    inf_values: int = 0
    original_nan_values: int = 0
    original_inf_values: int = 0

    def within(self, atol: float = DEFAULT_ATOL, rtol: float | None = None,
               min_top1: float | None = None) -> bool:
        """True when every stated bound holds; a bound given as ``None`` is not checked."""
        checks = [self.max_abs_diff <= atol if atol is not None else True,
                  not (self.nan_values or self.inf_values)]
        if rtol is not None:
            checks.append(self.max_rel_diff <= rtol)
        if min_top1 is not None and self.top1_agreement is not None:
            checks.append(self.top1_agreement >= min_top1)
        return all(checks)

    def summary(self) -> str:
        top1 = "n/a" if self.top1_agreement is None else f"{self.top1_agreement:.4f}"
        broken = (f", {nonfinite_text(self.nan_values, self.inf_values)} where the original's "
                  f"are finite" if self.nan_values or self.inf_values else "")
        return (f"max abs diff {self.max_abs_diff:.3g}, max rel diff {self.max_rel_diff:.3g}, "
                f"top-1 agreement {top1} over {self.batches} batch(es){broken}")


def _diff(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
        same = a.shape == b.shape and bool(np.all(a == b))
        return (0.0, 0.0) if same else (np.inf, np.inf)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    gap = np.abs(a64 - b64)
    # NaN on either side (and Inf against Inf, whose difference is NaN) is no agreement
    gap = np.where(np.isnan(gap), np.inf, gap)
    max_abs = float(gap.max()) if gap.size else 0.0
    scale = float(np.nanmax(np.abs(a64))) if a64.size and not np.all(np.isnan(a64)) else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else np.inf)
    return max_abs, max_rel


def _top1(a: np.ndarray, b: np.ndarray) -> tuple[int, int] | None:
    if a.ndim < 2 or a.shape[-1] < 2 or not np.issubdtype(a.dtype, np.floating):
        return None
    predicted_a = top1_predictions(a)
    same = (predicted_a == top1_predictions(b)) & (predicted_a != NO_CLASS)
    return int(same.sum()), int(same.size)


def compare(
    original: Model,
    candidate: Model,
    inputs: Mapping[str, np.ndarray] | Iterable[Mapping[str, np.ndarray]] | None = None,
    *,
    batches: int = 3,
    batch_size: int = 2,
    seed: int = 0,
    signature_name: str = DEFAULT_SIGNATURE,
    load_candidate: Callable[[Model], ModelRunner] | None = None,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> EquivalenceReport:
    """Run ``original`` and ``candidate`` on the same inputs and report how far they differ.

    One model is loaded at a time: ``original`` runs every batch and is released before
    ``candidate`` loads, so the check holds one copy of the weights (plus the outputs), not
    two; a runner passed in is the caller's and stays open. ``load_candidate`` loads the
    candidate instead of :func:`~tfopt.optimizer.runtime.load_runner`. A SavedModel on either side is
    scanned under ``policy`` (:mod:`tfopt.optimizer.model.op_scan`) before it loads."""
    a = load_runner(original, signature_name, policy=policy)
    if inputs is None:
        frozen = next((m for m in (original, candidate) if isinstance(m, FrozenModel)), None)
        int_ranges = infer_int_ranges(frozen.graph_def, frozen.signature) if frozen else {}
        vocabularies = infer_vocabularies(frozen.graph_def, frozen.signature) if frozen else {}
        feeds_list = [make_inputs(a.signature, batch_size, seed + i, int_ranges,
                                  vocabularies=vocabularies)
                      for i in range(batches)]
    elif isinstance(inputs, Mapping):
        feeds_list = [inputs]
    else:
        feeds_list = list(inputs)

    expected = [a(feeds) for feeds in feeds_list]
    signature = a.signature
    if a is not original:
        a.close()
        del a
        if _model_bytes(original) >= RELEASE_FROM_BYTES:
            return_freed_memory()  # the original's weights, before the candidate's load
    b = (load_candidate(candidate) if load_candidate is not None
         else load_runner(candidate, signature_name, policy=policy))
    try:
        if contract_difference(signature, b.signature):  # a dimension may be unknown on one side
            raise EquivalenceError(
                f"signatures differ: {signature.describe()} vs {b.signature.describe()}")
        outputs = [b(feeds) for feeds in feeds_list]
    finally:
        if b is not candidate:
            b.close()
    return _report(signature.output_keys, expected, outputs)


# A garbage collection costs tens of milliseconds with TensorFlow loaded: worth it to release
# a big model's weights (TF's function objects hold them in reference cycles), not a tiny one's.
RELEASE_FROM_BYTES = 32 * 2**20


def _model_bytes(model: Model) -> int:
    if isinstance(model, FrozenModel):
        return model.size_bytes
    if isinstance(model, (str, os.PathLike)):
        from tfopt.optimizer.model.footprint import disk_bytes

        return disk_bytes(model)
    return 0


def _report(output_keys, expected: list[dict], outputs: list[dict]) -> EquivalenceReport:
    abs_by_key = {k: 0.0 for k in output_keys}
    rel_by_key = dict(abs_by_key)
    top1_by_key: dict[str, list[int]] = {}
    nan = inf = 0
    original_nan, original_inf = count_nonfinite(expected)
    for out_a, out_b in zip(expected, outputs):
        for key in output_keys:
            x, y = out_a[key], out_b[key]
            if x.shape != y.shape:
                raise EquivalenceError(f"output '{key}' has shape {y.shape}, expected {x.shape}")
            max_abs, max_rel = _diff(x, y)
            broken = nonfinite_counts(x, y)
            nan, inf = nan + broken[0], inf + broken[1]
            abs_by_key[key] = max(abs_by_key[key], max_abs)
            rel_by_key[key] = max(rel_by_key[key], max_rel)
            agree = _top1(x, y)
            if agree:
                counts = top1_by_key.setdefault(key, [0, 0])
                counts[0] += agree[0]
                counts[1] += agree[1]
    outputs = tuple(
        OutputDiff(key=k, max_abs_diff=abs_by_key[k], max_rel_diff=rel_by_key[k],
                   top1_agreement=(top1_by_key[k][0] / top1_by_key[k][1])
                   if k in top1_by_key else None)
        for k in output_keys)
    agreements = [o.top1_agreement for o in outputs if o.top1_agreement is not None]
    return EquivalenceReport(
        max_abs_diff=max((o.max_abs_diff for o in outputs), default=0.0),
        max_rel_diff=max((o.max_rel_diff for o in outputs), default=0.0),
        top1_agreement=min(agreements) if agreements else None,
        outputs=outputs,
        batches=len(expected),
        nan_values=nan,
        inf_values=inf,
        original_nan_values=original_nan,
        original_inf_values=original_inf,
    )
