"""Data files of model inputs: ``.npz`` archives and TFRecord files of ``tf.train.Example``.

Both the labelled evaluation data (:mod:`tfopt.optimizer.verify.evaluation`: ``x`` and ``y``) and the
label-free calibration data (:mod:`tfopt.optimizer.inputs.calibration`: ``x``, or one array per input key)
come as one or the other; this module reads them, and each reader checks the names it needs. An
Example stores every feature as a flat list, so a TFRecord feature is read flat and reshaped to
the input's shape without the batch dimension (:func:`stack_feature`).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from tfopt.optimizer.errors import InvalidInputsError, first_line, shown
from tfopt.optimizer.model.signature import TensorSpecInfo
from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".record")


def is_tfrecord(path: str | os.PathLike) -> bool:
    return Path(path).suffix in TFRECORD_SUFFIXES


def npz_member_bytes(path: str | os.PathLike) -> dict[str, int]:
    """``{member: bytes once read}`` of an ``.npz`` file, from each ``.npy`` header's shape and
    dtype (the zip's stated size for any other member), reading no data: an 11 MB archive of
    zeros may declare 11 GiB. Not a zip, or a header that does not parse: one line."""
    sizes = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename.removesuffix(".npy")
                with archive.open(info) as member:
                    if member.read(6) != np.lib.format.MAGIC_PREFIX:  # raw bytes, not an array
                        sizes[name] = info.file_size
                        continue
                    shape, _, dtype = _array_header(member, tuple(member.read(2)))
                elements = 1
                for d in shape:
                    elements *= d  # Python ints: a hostile shape cannot overflow the size
                sizes[name] = elements * dtype.itemsize
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, IndexError,
            NotImplementedError) as exc:
        raise InvalidInputsError(f"{path}: unreadable .npz: {first_line(exc)}") from None
    return sizes


def _array_header(member, version: tuple[int, ...]):
    """``(shape, fortran order, dtype)`` of an ``.npy`` header past its magic and version
    (3.0, a UTF-8 header numpy writes only for non-Latin-1 field names, is refused)."""
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(member)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(member)
    raise ValueError(f"unsupported .npy header version {version}")


def require_npz_fits(path: str | os.PathLike, budget: MemoryBudget) -> None:
    """Refuse an ``.npz`` whose arrays, all read at once, would not fit ``budget`` (exit 7),
    from their headers (:func:`npz_member_bytes`) and before any is read."""
    sizes = npz_member_bytes(path)
    if sizes and sum(sizes.values()) > budget.bytes:
        largest = max(sizes, key=sizes.get)
        budget.require(sum(sizes.values()),
                       f"reading {path} (its headers declare {len(sizes)} array(s), the "
                       f"largest '{shown(largest)}' of {sizes[largest] / GIB:.1f} GiB)")


def read_npz(path: str | os.PathLike, budget: MemoryBudget | None = None
             ) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file (never pickled objects); one line when it is not one.
    Sized from its headers against ``budget`` (default: this process's) before any array is
    read (:func:`require_npz_fits`)."""
    from tfopt.optimizer.system.memory_budget import memory_budget

    if zipfile.is_zipfile(path):
        require_npz_fits(path, budget or memory_budget())
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
    from tfopt.optimizer.tf_runtime import import_tensorflow

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
