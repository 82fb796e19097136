"""Representative inputs for int8 calibration, and where they came from.

Calibration fits activation ranges; it needs inputs, not labels. Every int8 candidate, whatever
its runtime (LiteRT full int8; ONNX Runtime and OpenVINO static int8 read the same record), takes
the same :class:`Calibration`: one-row feed dicts and a ``source`` saying what they are, so that
a candidate calibrated on made-up inputs is never mistaken for one calibrated on real data.

Where the inputs come from (:func:`choose_calibration`), first found first:

1. calibration data (``calibration.data``, ``tfopt optimize --calibration-data``): an ``.npz``
   holding only inputs, ``x`` for a single-input signature or one array per input key, or a
   TFRecord of ``tf.train.Example`` with the same features (flat, reshaped to the input's
   shape); no labels needed;
2. the evaluation data's inputs (its ``x``; the labels are not read);
3. inputs generated from the signature (:func:`tfopt.optimizer.inputs.generated.make_inputs`: standard-normal
   floats). A candidate calibrated on them exists and is measured like any other, but its
   activation ranges fit noise, not the data it will serve: it is tagged
   :data:`SYNTHETIC`, where a calibrated one is tagged :data:`DATA`.

Rows are a seeded draw, not the first ones: calibration only fits ranges, and a file sorted by
class would otherwise calibrate on one class.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.inputs.data_files import is_tfrecord, read_examples, read_npz, stack_feature
from tfopt.optimizer.model.signature import SignatureInfo

log = logging.getLogger(__name__)

SYNTHETIC = "synthetic"
DATA = "data"


@dataclass(frozen=True)
class Calibration:
    feeds: tuple[dict[str, np.ndarray], ...]  # one row each, keyed like the signature
    source: str  # "eval data <path>", "calibration data <path>", or SYNTHETIC

    @property
    def synthetic(self) -> bool:
        return self.source == SYNTHETIC

    @property
    def tag(self) -> str:
        """What candidates and the report say: :data:`SYNTHETIC` or :data:`DATA`."""
        return SYNTHETIC if self.synthetic else DATA


def from_inputs(signature: SignatureInfo, arrays: Mapping[str, np.ndarray], samples: int,
                source: str, seed: int = 0) -> Calibration:
    """A seeded draw of ``samples`` rows, the same rows of every input, as one-row feeds cast
    to the signature's dtypes. ``arrays`` holds one array per input key, rows first."""
    missing = [k for k in signature.input_keys if k not in arrays]
    if missing:
        raise InvalidInputsError(f"{source}: no array for input(s) {', '.join(missing)} of "
                                 f"signature '{signature.name}'")
    arrays = {s.key: np.asarray(arrays[s.key]).astype(s.numpy_dtype, copy=False)
              for s in signature.inputs}
    counts = {key: len(a) if a.ndim else 0 for key, a in arrays.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        raise InvalidInputsError(f"{source}: the inputs need the same number of rows, at least "
                                 f"one; got {', '.join(f'{k}: {n}' for k, n in counts.items())}")
    scalar = set()
    for spec in signature.inputs:
        shape, row = spec.shape, arrays[spec.key].shape[1:]
        if shape == ():  # not batched: each row is the value itself
            scalar.add(spec.key)
        elif shape is not None and (len(row) != len(shape) - 1 or any(
                d is not None and d != r for d, r in zip(shape[1:], row))):
            raise InvalidInputsError(f"{source}: rows of shape {row} do not fit input "
                                     f"{spec.describe()}")
    n = next(iter(counts.values()))
    rows = np.random.default_rng(seed).permutation(n)[:samples]
    return Calibration(tuple({key: a[i] if key in scalar else a[i:i + 1]
                              for key, a in arrays.items()} for i in rows), source)


def from_rows(signature: SignatureInfo, x: np.ndarray, samples: int, source: str,
              seed: int = 0) -> Calibration:
    """:func:`from_inputs` for a single-input signature fed ``x`` (e.g. the eval data's)."""
    if len(signature.inputs) != 1:
        raise InvalidInputsError(
            f"{source}: 'x' feeds one input; signature '{signature.name}' has "
            f"{len(signature.inputs)} ({', '.join(signature.input_keys)}): give one array "
            f"per input key")
    return from_inputs(signature, {signature.inputs[0].key: x}, samples, source, seed)


def checked_feeds(signature: SignatureInfo, feeds: Iterable[Mapping[str, np.ndarray]],
                  limit: int, needed_by: str) -> list[dict[str, np.ndarray]]:
    """The first ``limit`` feed dicts, each holding every input of ``signature`` in its dtype;
    ``needed_by`` (the flavour that calibrates) names who asked when there are none."""
    checked = []
    for feed in feeds:
        if len(checked) >= limit:
            break
        missing = [k for k in signature.input_keys if k not in feed]
        if missing:
            raise InvalidInputsError(f"calibration sample {len(checked)} lacks input(s) "
                                     f"{', '.join(missing)} of signature '{signature.name}'")
        checked.append({s.key: np.asarray(feed[s.key]).astype(s.numpy_dtype, copy=False)
                        for s in signature.inputs})
    if not checked:
        raise InvalidInputsError(f"{needed_by} needs calibration data: the representative "
                                 "dataset is empty")
    return checked

def synthetic(signature: SignatureInfo, samples: int, seed: int = 1000) -> Calibration:
    """``samples`` one-row inputs generated from the signature, tagged :data:`SYNTHETIC`."""
    from tfopt.optimizer.inputs.generated import make_inputs

    log.warning("calibration: no calibration data; int8 candidates calibrate on %d inputs "
                "generated from the signature and are tagged %s", samples, SYNTHETIC)
    return Calibration(tuple(make_inputs(signature, batch_size=1, seed=seed + i)
                             for i in range(samples)), SYNTHETIC)


def read_inputs(path: str | os.PathLike, signature: SignatureInfo) -> dict[str, np.ndarray]:
    """``{input key: rows}`` from a file of inputs: an ``.npz`` or a TFRecord whose arrays (or
    features) are named by input key, or ``x`` for a single-input signature. Other arrays,
    labels among them, are ignored."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInputsError(f"no such calibration data file: {path}")
    if is_tfrecord(path):
        records = read_examples(path)
        present = set.intersection(*(set(r) for r in records))
        names = _names(path, signature, present)
        return {spec.key: stack_feature(path, records, names[spec.key], spec)
                for spec in signature.inputs}
    arrays = read_npz(path)
    return {key: arrays[name] for key, name in _names(path, signature, set(arrays)).items()}


def _names(path: Path, signature: SignatureInfo, present: set[str]) -> dict[str, str]:
    """Input key -> the name its rows have in the file."""
    keys = signature.input_keys
    if all(k in present for k in keys):
        return {k: k for k in keys}
    if len(keys) == 1 and "x" in present:
        return {keys[0]: "x"}
    wanted = "'x' or " if len(keys) == 1 else ""
    raise InvalidInputsError(
        f"{path}: calibration data needs {wanted}one array per input key "
        f"({', '.join(keys)}); found {', '.join(sorted(present)) or 'none'}")


def choose_calibration(signature: SignatureInfo, samples: int,
                       calibration_data: str | os.PathLike | None = None,
                       eval_data: str | os.PathLike | None = None,
                       fetch: Callable[[str], Path] | None = None) -> Calibration:
    """The calibration data's inputs when given, else the eval data's, else :func:`synthetic`.

    ``fetch`` turns a location that is not a local path (``s3://...``) into a local file; the
    calibration's ``source`` names the location as given."""
    for what, location in (("calibration data", calibration_data), ("eval data", eval_data)):
        if location is not None:
            path = fetch(str(location)) if fetch is not None else Path(location)
            return from_inputs(signature, read_inputs(path, signature), samples,
                               f"{what} {location}")
    return synthetic(signature, samples)
