"""The JSON sidecar beside a model file that tfopt converted: what it is, and how to load it.

An ``.onnx`` file or an OpenVINO IR (``.xml`` with its ``.bin``) says nothing about where it came
from, which quantization made it, or the options its runtime must be given to run it as it was
measured (an OpenVINO precision hint, an ONNX Runtime optimization level). The sidecar,
``<file>.json`` (the model's file name plus ``.json``, so the pair sorts together and a glob for
``*.onnx`` or ``*.xml`` skips it), records the format and flavour, every file of the model with
its SHA-256, the source SavedModel's path, digest and signature, the converter and its options,
the calibration data's size and origin, the runtime options its runner applies
(:mod:`tfopt.optimizer.runtime`), and a Python snippet that loads and calls it. The snippet names the
files relative to the directory holding them, since they travel together (workspace, registry,
serving image).

:mod:`tfopt.optimizer.candidates.litert.manifest` is the LiteRT flavour of the same idea, older and with its own
keys; it shares the helpers here.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.files.atomic import atomic_file
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo

SIDECAR_SUFFIX = ".json"
SIDECAR_VERSION = 1
_CHUNK = 1 << 20


class SidecarError(TfoptError):
    """A sidecar that is not JSON, lacks a key, or describes another format."""


def sidecar_path(model_path: str | os.PathLike) -> Path:
    model_path = Path(model_path)
    return model_path.with_name(model_path.name + SIDECAR_SUFFIX)


def spec_dicts(specs: Iterable[TensorSpecInfo]) -> list[dict]:
    return [{"key": s.key, "dtype": s.dtype, "shape": None if s.shape is None else list(s.shape)}
            for s in specs]


def placeholder(spec: TensorSpecInfo) -> str:
    """A Python expression for an input of ``spec``'s dtype and shape (unknown dims as 1)."""
    shape = tuple(1 if d is None else d for d in (spec.shape if spec.shape is not None else (1,)))
    if spec.dtype == "string":
        return f"np.full({shape!r}, b'', dtype=object)"
    return f"np.zeros({shape!r}, {spec.dtype!r})"


def feeds_literal(signature: SignatureInfo) -> str:
    """``{'key': np.zeros(...), ...}``: one call's inputs, as a snippet writes them."""
    return "{" + ", ".join(f"{s.key!r}: {placeholder(s)}" for s in signature.inputs) + "}"


def model_description(flavour: str, description: str, signature: SignatureInfo,
                      source_path: str, source_digest: str | None) -> dict:
    """The keys every sidecar has: the flavour, the signature's name, inputs and outputs, and
    the source SavedModel."""
    return {"flavour": flavour, "flavour_description": description,
            "signature": signature.name, "inputs": spec_dicts(signature.inputs),
            "outputs": spec_dicts(signature.outputs),
            "source": {"path": source_path, "digest": source_digest}}


def snippet(runtime_import: str, *lines: str) -> str:
    """A load snippet: the imports every one needs and ``runtime_import``, then ``lines``."""
    return "\n".join(["import os", "", "import numpy as np", runtime_import, "", *lines]) + "\n"


def file_record(path: Path) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return {"name": path.name, "sha256": digest.hexdigest(), "size_bytes": path.stat().st_size}


@dataclass(frozen=True)
class Sidecar:
    """What a converted model is. ``files`` are the model's, the loaded one first, as they
    stand in one directory; ``runtime_options`` are what its runner passes to the runtime."""

    format: str
    flavour: str
    flavour_description: str
    files: tuple[Path, ...]
    signature: SignatureInfo
    source_path: str
    source_digest: str | None
    converter: dict
    runtime_package: str
    runtime_options: dict
    load_python: str
    calibration: dict | None = None  # {"samples": n, "source": where they came from}

    def to_dict(self) -> dict:
        return {
            "format": self.format,
            "sidecar_version": SIDECAR_VERSION,
            "file": self.files[0].name,
            "files": [file_record(f) for f in self.files],
            **model_description(self.flavour, self.flavour_description, self.signature,
                                self.source_path, self.source_digest),
            "converter": self.converter,
            "calibration": self.calibration,
            "runtime": {"package": self.runtime_package, "options": self.runtime_options},
            "load": {"python": self.load_python},
        }


def write_sidecar(sidecar: Sidecar, overwrite: bool = False) -> Path:
    """Write ``<first file>.json`` in one rename, after the model's files are in place (their
    digests are read from disk)."""
    path = sidecar_path(sidecar.files[0])
    with atomic_file(path, overwrite) as staging:
        staging.write_text(json.dumps(sidecar.to_dict(), indent=2) + "\n")
    return path


def read_sidecar(model_path: str | os.PathLike, fmt: str,
                 required: Sequence[str] = ("file", "flavour", "signature", "runtime", "load"),
                 ) -> dict | None:
    """The sidecar beside ``model_path`` as a dict, checked to describe a ``fmt`` model; None
    when there is none (a model converted elsewhere)."""
    path = sidecar_path(model_path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SidecarError(f"unreadable sidecar {path}: {exc}") from None
    found = data.get("format") if isinstance(data, dict) else None
    if found != fmt:
        raise SidecarError(f"sidecar {path} describes a model in format '{found}', not "
                           f"'{fmt}'")
    missing = [k for k in required if k not in data]
    if missing:
        raise SidecarError(f"sidecar {path} lacks {', '.join(missing)}")
    return data


def runtime_options(model_path: str | os.PathLike, fmt: str) -> dict:
    """The options the sidecar says this model runs with; none without a sidecar."""
    data = read_sidecar(model_path, fmt)
    if data is None:
        return {}
    options = (data.get("runtime") or {}).get("options") or {}
    if not isinstance(options, dict):
        raise SidecarError(f"sidecar {sidecar_path(model_path)}: runtime.options is not a "
                           f"mapping")
    return options
