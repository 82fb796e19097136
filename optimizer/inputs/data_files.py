"""Data files of model inputs: ``.npz`` archives and TFRecord files of ``tf.train.Example``.

Both the labelled evaluation data (:mod:`optimizer.verify.evaluation`: ``x`` and ``y``) and the
label-free calibration data (:mod:`optimizer.inputs.calibration`: ``x``, or one array per input key)
come as one or the other; this module reads them, and each reader checks the names it needs. An
Example stores every feature as a flat list, so a TFRecord feature is read flat and reshaped to
the input's shape without the batch dimension (:func:`stack_feature`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from optimizer.errors import InvalidInputsError
from optimizer.model.signature import TensorSpecInfo

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".record")


def is_tfrecord(path: str | os.PathLike) -> bool:
    return Path(path).suffix in TFRECORD_SUFFIXES


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file (never pickled objects); one line when it is not one."""
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError):
        data = None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise InvalidInputsError(f"{path}: not an .npz file, nor a TFRecord file named "
                                 f"{' / '.join(TFRECORD_SUFFIXES)}")
    with data:
        try:
            return {name: data[name] for name in data.files}
        except (ValueError, OSError, EOFError) as exc:
            raise InvalidInputsError(f"{path}: unreadable .npz: {exc}") from None


def _values(feature) -> np.ndarray:
    if feature.HasField("int64_list"):
        return np.asarray(feature.int64_list.value, dtype=np.int64)
    if feature.HasField("float_list"):
        return np.asarray(feature.float_list.value, dtype=np.float32)
    return np.asarray(feature.bytes_list.value, dtype=object)


def read_examples(path: str | os.PathLike) -> list[dict[str, np.ndarray]]:
    """Every record of ``path`` as ``{feature name: flat array}`` (float lists as float32,
    int64 lists as int64); one-line errors for an unreadable or empty file."""
    from optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    records = []
    try:
        for raw in tf.data.TFRecordDataset(str(path)):
            features = tf.train.Example.FromString(raw.numpy()).features.feature
            records.append({name: _values(feature) for name, feature in features.items()})
    except tf.errors.OpError as exc:
        raise InvalidInputsError(f"{path}: not a readable TFRecord file: "
                                 f"{str(exc).strip().splitlines()[0]}") from None
    if not records:
        raise InvalidInputsError(f"{path}: no records")
    return records


def example_shape(spec: TensorSpecInfo | None, values: int) -> tuple[int, ...]:
    """The per-example shape a flat feature of ``values`` values is reshaped to: ``spec``'s
    shape minus the batch (flat when there is no spec or its rank is unknown)."""
    if spec is None or spec.shape is None:
        return (values,)
    dims = list(spec.shape[1:])
    if dims.count(None) > 1:
        raise InvalidInputsError(f"cannot reshape a TFRecord feature of {values} values to "
                                 f"{spec.describe()}: several unknown dimensions")
    return tuple(-1 if d is None else d for d in dims)


def stack_feature(path: str | os.PathLike, records: list[dict[str, np.ndarray]], name: str,
                  spec: TensorSpecInfo | None) -> np.ndarray:
    """Feature ``name`` of every record, each reshaped to ``spec`` (:func:`example_shape`),
    stacked into one array with the records as rows."""
    shape = example_shape(spec, records[0][name].size)
    try:
        return np.stack([r[name].reshape(shape) for r in records])
    except ValueError:
        raise InvalidInputsError(
            f"{path}: '{name}' has {records[0][name].size} values, which do not fit the input "
            f"shape {spec.describe() if spec else shape}") from None
