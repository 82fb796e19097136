"""NaN and Inf in a model's outputs, as every check reads them.

A NaN is never equal to anything, itself included: two models that both answer NaN have not
agreed, and the argmax of a row holding NaN is no prediction (numpy's is the NaN's index,
often 0, which a constant label or a constant model would then "match"). A model that answers
NaN or Inf where the model it replaces answers finite numbers is broken, however it times.

- :func:`top1_predictions`: argmax per row, ``-1`` (no class) for a row holding NaN;
- :func:`nonfinite_counts`: how many values of a candidate's output are NaN, how many ±Inf,
  where the reference's are finite;
- :func:`refuse_nonfinite_source`: the input model's own outputs must be finite on the data it
  is judged on (:func:`count_nonfinite`), or there is nothing to compare its candidates with
  (exit 2, before any work).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from tfopt.optimizer.errors import InvalidInputsError

NO_CLASS = -1


def is_numeric(array: np.ndarray) -> bool:
    return array.dtype.kind in "biufc"


def top1_predictions(scores: np.ndarray) -> np.ndarray:
    """``argmax(scores, axis=-1)``, with :data:`NO_CLASS` where the row holds a NaN."""
    predicted = np.argmax(scores, axis=-1)
    if np.issubdtype(scores.dtype, np.floating):
        predicted = np.where(np.isnan(scores).any(axis=-1), NO_CLASS, predicted)
    return predicted


def nonfinite_counts(reference: np.ndarray, candidate: np.ndarray) -> tuple[int, int]:
    """``(NaN values, ±Inf values)`` of ``candidate`` where ``reference`` is finite (same
    shape); ``(0, 0)`` for outputs that are not numbers."""
    if not (is_numeric(reference) and is_numeric(candidate)):
        return 0, 0
    finite_before = np.isfinite(reference)
    return (int(np.count_nonzero(finite_before & np.isnan(candidate))),
            int(np.count_nonzero(finite_before & np.isinf(candidate))))


def nonfinite_text(nan: int, inf: int) -> str:
    """``"12 NaN and 3 Inf values"``, naming only what occurred."""
    parts = [f"{nan} NaN" if nan else "", f"{inf} Inf" if inf else ""]
    return " and ".join(p for p in parts if p) + f" value{'s' if nan + inf != 1 else ''}"


def count_nonfinite(outputs: Iterable[Mapping[str, np.ndarray]]) -> tuple[int, int]:
    """``(NaN values, ±Inf values)`` over the numeric outputs of every batch of ``outputs``."""
    nan = inf = 0
    for batch in outputs:
        for value in batch.values():
            value = np.asarray(value)
            if is_numeric(value):
                nan += int(np.count_nonzero(np.isnan(value)))
                inf += int(np.count_nonzero(np.isinf(value)))
    return nan, inf


def refuse_nonfinite_source(nan: int, inf: int, model: str, inputs: str) -> None:
    """One line (exit 2) when the input ``model``'s outputs on ``inputs`` (what they were:
    "the evaluation data FILE", "inputs generated from its signature") held ``nan`` NaN and
    ``inf`` Inf values: accuracy and agreement measured against them would mean nothing."""
    if nan or inf:
        raise InvalidInputsError(
            f"{model}: its outputs hold {nonfinite_text(nan, inf)} on {inputs}; a model whose "
            f"own outputs are not finite cannot be optimized against them (fix the model or "
            f"the data)")
