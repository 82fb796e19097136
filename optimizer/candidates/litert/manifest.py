"""The JSON sidecar beside a converted ``.tflite``: what the file is and how to load it.

A flatbuffer says nothing about where it came from or which quantization made it; the sidecar,
``<file>.tflite.json`` (the model's file name plus ``.json``, so the pair sorts together and a
glob for ``*.tflite`` skips it), records the flavour, the source SavedModel's digest and
signature, the inputs and outputs, the TensorFlow version that converted it, the model's own
SHA-256, and a Python snippet that loads and calls it with ``ai_edge_litert``. The snippet names
the model by file name, relative to the directory holding both files, since they travel together
(workspace, registry, serving image).
"""

from __future__ import annotations

import json
import keyword
import os
from dataclasses import dataclass, field
from pathlib import Path

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.model.sidecar import model_description, placeholder
from tfopt.optimizer.model.signature import SignatureInfo

FORMAT = "litert"
MANIFEST_SUFFIX = ".json"
MANIFEST_VERSION = 1


class ManifestError(TfoptError):
    """A LiteRT sidecar that is missing a key, not JSON, or not a LiteRT sidecar."""


def manifest_path(model_path: str | os.PathLike) -> Path:
    model_path = Path(model_path)
    return model_path.with_name(model_path.name + MANIFEST_SUFFIX)


def load_snippet(file_name: str, signature: SignatureInfo) -> str:
    """Python that loads the model with ai_edge_litert and calls its signature once."""
    args = []
    for spec in signature.inputs:
        if spec.key.isidentifier() and not keyword.iskeyword(spec.key):
            args.append(f"{spec.key}={placeholder(spec)}")
        else:
            args.append(f"**{{{spec.key!r}: {placeholder(spec)}}}")
    outputs = ", ".join(repr(k) for k in signature.output_keys)
    return "\n".join([
        "import os",
        "",
        "import numpy as np",
        "from ai_edge_litert.interpreter import Interpreter",
        "",
        "# XNNPACK is applied by default; the interpreter's own default is 1 thread. Use the",
        "# CPUs this process may run on (a container's CPU quota may be lower still).",
        f"interpreter = Interpreter(model_path={file_name!r},",
        "                          num_threads=len(os.sched_getaffinity(0)))",
        f"run = interpreter.get_signature_runner({signature.name!r})",
        f"outputs = run({', '.join(args)})  # dict with keys {outputs}",
    ]) + "\n"


@dataclass(frozen=True)
class Manifest:
    flavour: str
    flavour_description: str
    file: str
    sha256: str
    size_bytes: int
    signature: SignatureInfo
    source_path: str
    source_digest: str | None
    tensorflow_version: str
    converter: dict = field(default_factory=dict)
    calibration_samples: int | None = None
    calibration_source: str | None = None  # tfopt.optimizer.inputs.calibration.Calibration.source

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "manifest_version": MANIFEST_VERSION,
            "file": self.file,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            **model_description(self.flavour, self.flavour_description, self.signature,
                                self.source_path, self.source_digest),
            "converter": {"tensorflow_version": self.tensorflow_version, **self.converter},
            "calibration_samples": self.calibration_samples,
            "calibration_source": self.calibration_source,
            "runtime": {"package": "ai-edge-litert", "delegate": "XNNPACK (default)"},
            "load": {"python": load_snippet(self.file, self.signature)},
        }


def write_manifest(manifest: Manifest, path: str | os.PathLike) -> None:
    """Write ``path`` in place; the caller stages it (see :mod:`tfopt.optimizer.files.atomic`)."""
    Path(path).write_text(json.dumps(manifest.to_dict(), indent=2) + "\n")


def read_manifest(path: str | os.PathLike) -> dict:
    """The sidecar as a dict, checked to be a LiteRT one; one-line errors otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"no LiteRT sidecar at {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"unreadable LiteRT sidecar {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(f"{path} is not a LiteRT sidecar (format is not '{FORMAT}')")
    missing = [k for k in ("file", "flavour", "signature", "inputs", "outputs", "load")
               if k not in data]
    if missing:
        raise ManifestError(f"LiteRT sidecar {path} lacks {', '.join(missing)}")
    return data
