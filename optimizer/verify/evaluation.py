"""Quality of a model on labelled data, batch by batch, with a pluggable metric.

Labelled data is an ``.npz`` holding ``x`` and ``y``, or a TFRecord file of ``tf.train.Example``
records with a float list ``x`` (a bytes list for a string input; reshaped to the signature's
input shape) and an int64 (or float) ``y``. String ``x`` in an ``.npz`` is a numpy unicode or
bytes array (``allow_pickle`` stays off, so not an object array). The model's single input is fed ``x``; its first output (or ``output_key``) is
scored against ``y`` by a metric from :data:`METRICS`, a registry by name: ``top1`` for
classifiers, ``mse`` and ``mae`` for regression. Each metric says whether higher is better, so
that "accuracy drop" means the same thing for all of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.inputs.data_files import is_tfrecord, read_examples, read_npz, stack_feature
from tfopt.optimizer.model.signature import SignatureInfo
from tfopt.optimizer.runtime import ModelRunner
from tfopt.optimizer.verify.finite import count_nonfinite, refuse_nonfinite_source, top1_predictions


@dataclass(frozen=True)
class Metric:
    name: str
    fn: Callable[[np.ndarray, np.ndarray], float]  # (model outputs, labels) -> score
    higher_is_better: bool
    description: str
    # labels per row the metric scores against one row of output of this shape; None: unchecked
    labels_per_row: Callable[[tuple[int, ...]], int] | None = None
    # its labels are class ids: whole numbers from 0, below the output's last dimension
    class_ids: bool = False


METRICS: dict[str, Metric] = {}


def register_metric(name: str, higher_is_better: bool, description: str,
                    labels_per_row: Callable[[tuple[int, ...]], int] | None = None,
                    class_ids: bool = False):
    """Decorator: ``@register_metric("f1", True, "...")`` makes a metric usable by name.
    ``labels_per_row`` lets labels be checked against the model's output before anything runs
    (:func:`check_labels_fit`); ``class_ids`` that its labels are class ids, checked as such.
    """

    def register(fn: Callable[[np.ndarray, np.ndarray], float]):
        METRICS[name] = Metric(name, fn, higher_is_better, description, labels_per_row,
                               class_ids)
        return fn

    return register


def get_metric(name: str) -> Metric:
    if name not in METRICS:
        raise InvalidInputsError(f"unknown metric '{name}'; available: {', '.join(sorted(METRICS))}")
    return METRICS[name]


@register_metric("top1", True, "top-1 accuracy: share of rows (of positions, for a tagger's "
                                "per-position scores) whose argmax is the label",
                 labels_per_row=lambda row: int(np.prod(row[:-1])), class_ids=True)
def top1(scores: np.ndarray, labels: np.ndarray) -> float:
    predicted = top1_predictions(scores)  # a row holding NaN predicts no class
    if labels.size != predicted.size:
        raise InvalidInputsError(
            f"the labels (y of shape {tuple(labels.shape)}) do not match the model's top-1 "
            f"predictions (shape {tuple(predicted.shape)}): give one label per row, or one per "
            f"position for a model that scores each position")
    return float(np.mean(predicted == labels.reshape(predicted.shape)))


@register_metric("mse", False, "mean squared error against the labels",
                 labels_per_row=lambda row: int(np.prod(row)))
def mse(predictions: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean((predictions.astype(np.float64)
                          - labels.reshape(predictions.shape).astype(np.float64)) ** 2))


@register_metric("mae", False, "mean absolute error against the labels",
                 labels_per_row=lambda row: int(np.prod(row)))
def mae(predictions: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.abs(predictions.astype(np.float64)
                                - labels.reshape(predictions.shape).astype(np.float64))))


@dataclass(frozen=True)
class LabelledData:
    x: np.ndarray
    y: np.ndarray
    source: str

    def __len__(self) -> int:
        return len(self.x)


def _read_tfrecord(path: Path, signature: SignatureInfo | None) -> LabelledData:
    records = read_examples(path)
    for record in records:
        if "x" not in record or "y" not in record:
            raise InvalidInputsError(
                f"{path}: every tf.train.Example needs features 'x' and 'y'; found "
                f"{', '.join(sorted(record)) or 'none'}")
    spec = signature.inputs[0] if signature is not None and len(signature.inputs) == 1 else None
    x = stack_feature(path, records, "x", spec)
    if x.dtype.kind == "f":  # float lists read as float32; bytes (string inputs) stay objects
        x = x.astype(np.float32, copy=False)
    y = np.stack([r["y"] for r in records])
    return LabelledData(x=x, y=y.reshape(len(y)) if y.shape[1:] == (1,) else y, source=str(path))


def load_labelled_data(path: str | os.PathLike, signature: SignatureInfo | None = None,
                       metric: str | None = None) -> LabelledData:
    """``x``/``y`` from an ``.npz`` or a TFRecord file of ``tf.train.Example``, at least one
    row; with the model's ``signature``, ``x`` that does not fit its input is refused now
    (:func:`check_inputs_fit`), and with a ``metric`` too, labels that metric could not score
    (:func:`check_labels_fit`). Each refusal is one line (exit 2), before any model runs."""
    data = _read_labelled_data(Path(path), signature)
    if signature is not None:
        check_inputs_fit(data, signature)
    if metric is not None:
        check_label_values(data, metric)
        if signature is not None:
            check_labels_fit(data, signature, metric)
    return data


def _first_bad(mask: np.ndarray) -> int:
    """The first row holding a True of ``mask``."""
    return int(np.argwhere(mask.reshape(len(mask), -1).any(axis=1))[0][0])


def check_inputs_fit(data: LabelledData, signature: SignatureInfo) -> None:
    """Refuse ``x`` the model's single input cannot take: strings for a numeric input or
    numbers for a string input, a row of another shape than the input's (where it is static),
    NaN or Inf in float ``x``. A model of several inputs is fed ``x`` by nothing here."""
    if len(signature.inputs) != 1:
        return
    spec, x = signature.inputs[0], data.x
    wants_strings = spec.numpy_dtype == np.dtype(object)
    if wants_strings != (x.dtype.kind in "OSU"):
        what = f"strings ({x.dtype})" if x.dtype.kind in "OSU" else f"{x.dtype} numbers"
        raise InvalidInputsError(f"{data.source}: x holds {what}, but the model's input is "
                                 f"{spec.describe()}")
    if spec.shape is not None:
        row = tuple(spec.shape[1:])
        if x.ndim - 1 != len(row) or any(d is not None and d != n
                                         for d, n in zip(row, x.shape[1:])):
            raise InvalidInputsError(
                f"{data.source}: x has rows of shape {tuple(x.shape[1:])}, but the model's "
                f"input is {spec.describe()}")
    if x.dtype.kind in "fc" and not np.isfinite(x).all():
        raise InvalidInputsError(f"{data.source}: x holds NaN or Inf (row "
                                 f"{_first_bad(~np.isfinite(x))}); evaluation data must be "
                                 f"finite numbers")


def check_label_values(data: LabelledData, metric: str) -> None:
    """Refuse labels no ``metric`` score could mean anything against: not numbers, NaN or Inf,
    and for a metric of class ids (``top1``) anything but whole numbers from 0 (their upper
    bound, the output's classes, is :func:`check_labels_fit`'s)."""
    y = data.y
    if y.dtype.kind not in "biuf":
        raise InvalidInputsError(f"{data.source}: y holds {y.dtype} values, not numbers; "
                                 f"metric {metric} needs numeric labels")
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        raise InvalidInputsError(f"{data.source}: y holds NaN or Inf (row "
                                 f"{_first_bad(~np.isfinite(y))}); labels must be finite")
    if get_metric(metric).class_ids:
        whole = y == np.floor(y) if y.dtype.kind == "f" else np.ones(y.shape, bool)
        if not whole.all() or (y < 0).any():
            bad = y[~whole | (y < 0)].flat[0].item()
            raise InvalidInputsError(f"{data.source}: y holds {bad!r} (row "
                                     f"{_first_bad(~whole | (y < 0))}); metric {metric} needs "
                                     f"class ids, whole numbers from 0")


def check_labels_fit(data: LabelledData, signature: SignatureInfo, metric: str,
                     output_key: str | None = None) -> None:
    """Refuse, in one line, labels ``metric`` cannot score against the model's output, read
    from the signature before any model runs: a wrong label file otherwise fails only once
    every candidate has been built and timed. An output whose shape past the batch is not
    static, or a metric that does not say how many labels it scores, is not checked."""
    scorer = get_metric(metric)
    outputs = {o.key: o for o in signature.outputs}
    output = outputs.get(output_key or signature.outputs[0].key)
    if scorer.labels_per_row is None or output is None or output.shape is None:
        return
    row = output.shape[1:]
    if any(d is None for d in row):
        return
    expected = scorer.labels_per_row(tuple(row))
    given = int(np.prod(data.y.shape[1:]))
    if given != expected:
        raise InvalidInputsError(
            f"{data.source}: the labels (y of shape {tuple(data.y.shape)}) do not fit the "
            f"model's output {output.describe()} for metric {metric}: it scores "
            f"{expected} label(s) per row, y has {given}")
    if scorer.class_ids and data.y.dtype.kind in "biuf" and row:
        classes = row[-1]
        if (data.y >= classes).any():
            raise InvalidInputsError(
                f"{data.source}: y holds class id {data.y.max().item()!r} (row "
                f"{_first_bad(data.y >= classes)}), outside the model's output "
                f"{output.describe()}: {classes} classes, ids 0 to {classes - 1}")


def _read_labelled_data(path: Path, signature: SignatureInfo | None) -> LabelledData:
    if not path.is_file():
        raise InvalidInputsError(f"no such evaluation data file: {path}")
    if is_tfrecord(path):
        return _read_tfrecord(path, signature)
    data = read_npz(path)
    if "x" not in data or "y" not in data:
        raise InvalidInputsError(f"{path}: an .npz of evaluation data needs arrays 'x' "
                                 f"and 'y'; found {', '.join(data) or 'none'}")
    x, y = data["x"], data["y"]
    if x.ndim == 0 or y.ndim == 0:
        raise InvalidInputsError(f"{path}: x and y must be arrays of rows; "
                                 f"{'x' if x.ndim == 0 else 'y'} is a single value")
    if len(x) != len(y):
        raise InvalidInputsError(f"{path}: x has {len(x)} rows but y has {len(y)}")
    if not len(x):
        raise InvalidInputsError(f"{path}: no rows: evaluation data needs at least one example")
    return LabelledData(x=x, y=y, source=str(path))


# Rows per call when evaluating: the evaluate step, the benchmark's accuracy and fidelity rows
# and the library's own calls all use it. 64 rows of a small image model is a few MB per call.
EVAL_BATCH_SIZE = 64


def predict(runner: ModelRunner, x: np.ndarray, batch_size: int = EVAL_BATCH_SIZE,
            output_key: str | None = None) -> np.ndarray:
    """Outputs for every row of ``x``; the model's single input is fed ``x``."""
    if len(runner.signature.inputs) != 1:
        raise ValueError("predict() feeds one array; the model has several inputs")
    spec = runner.signature.inputs[0]
    out_key = output_key or runner.signature.outputs[0].key
    x = np.asarray(x).astype(spec.numpy_dtype, copy=False)
    parts = [runner({spec.key: x[i:i + batch_size]})[out_key]
             for i in range(0, len(x), batch_size)]
    return np.concatenate(parts, axis=0)


def evaluate(runner: ModelRunner, data: LabelledData, metric: str = "top1",
             batch_size: int = EVAL_BATCH_SIZE, output_key: str | None = None) -> float:
    """``metric`` of the model's outputs on ``data.x`` against ``data.y``."""
    return get_metric(metric).fn(predict(runner, data.x, batch_size, output_key), data.y)


def top1_accuracy(runner: ModelRunner, x: np.ndarray, y: np.ndarray, batch_size: int = EVAL_BATCH_SIZE,
                  output_key: str | None = None) -> float:
    return top1(predict(runner, x, batch_size, output_key), y)


def refuse_nonfinite_input_model(model: str | os.PathLike, data: LabelledData,
                                 signature_name: str, policy, name: str | None = None) -> None:
    """One line (exit 2) when the input ``model`` answers NaN or Inf on ``data``'s ``x``
    (:func:`~tfopt.optimizer.verify.finite.refuse_nonfinite_source`): every candidate's accuracy and
    agreement would be measured against outputs that mean nothing. ``name``: how the line
    names the model (default its path)."""
    from tfopt.optimizer.runtime import load_runner

    runner = load_runner(model, signature_name, policy=policy)
    try:
        if len(runner.signature.inputs) != 1:
            return  # evaluation data feeds one input; such a model is not evaluated on it
        key = runner.signature.inputs[0].key
        x = data.x.astype(runner.signature.inputs[0].numpy_dtype, copy=False)
        nan, inf = count_nonfinite(runner({key: x[i:i + EVAL_BATCH_SIZE]})
                                   for i in range(0, len(x), EVAL_BATCH_SIZE))
    finally:
        runner.close()
    refuse_nonfinite_source(nan, inf, name or str(model), f"the evaluation data {data.source}")
