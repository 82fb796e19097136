"""Which runtime runs which model format, and how a model on disk says its format.

One :class:`Runtime` per format, each implemented by one module of this package that defines
``load_runner(path, signature, num_threads, policy)`` and ``read_signature(path, signature,
policy)``; ``policy`` is the model scan's (:mod:`tfopt.optimizer.model.op_scan`), which only a runtime
that loads SavedModels (programs) applies. The
module is imported only when a model of its format is loaded, so a runtime that is not
installed costs nothing until it is needed, and then fails with one line naming the package.

Adding a runtime: a module here, one :data:`RUNTIMES` entry, and a test file.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.runtime.base import RuntimeUnavailableError, UnknownFormatError

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


@dataclass(frozen=True)
class Runtime:
    """How models of one ``format`` are run.

    ``name`` is what a version's ``tfopt.runtime`` tag says; ``package`` is what to install;
    ``per_model_threads``: the thread count is set per model (an interpreter's or session's
    ``num_threads``) rather than once per process, as TensorFlow's pools are.
    """

    format: str
    name: str
    package: str
    module: str
    imports: str  # the module whose absence means the runtime is not installed
    per_model_threads: bool
    suffix: str | None  # the file a model of this format is, or None for a directory
    companions: tuple[str, ...] = ()  # suffixes of files that belong with it (an IR's .bin)
    thread_option: str | None = None  # what a per-model thread count is called when loading

    def implementation(self):
        try:
            importlib.import_module(self.imports)
        except ImportError:
            raise RuntimeUnavailableError(
                f"running a {self.format} model needs the {self.package} package, which is "
                f"not installed (pip install {self.package})") from None
        return importlib.import_module(self.module)

    def available(self) -> bool:
        try:
            importlib.import_module(self.imports)
        except ImportError:
            return False
        return True


RUNTIMES: dict[str, Runtime] = {
    "savedmodel": Runtime("savedmodel", "tensorflow", "tensorflow-cpu",
                          "tfopt.optimizer.runtime.tensorflow", "tensorflow", False, None),
    "tflite": Runtime("tflite", "ai-edge-litert", "ai-edge-litert", "tfopt.optimizer.runtime.litert",
                      "ai_edge_litert.interpreter", True, ".tflite",
                      thread_option="num_threads"),
    "onnx": Runtime("onnx", "onnxruntime", "onnxruntime", "tfopt.optimizer.runtime.onnx",
                    "onnxruntime", True, ".onnx", thread_option="intra_op_num_threads"),
    "openvino": Runtime("openvino", "openvino", "openvino", "tfopt.optimizer.runtime.openvino",
                        "openvino", True, ".xml", companions=(".bin",),
                        thread_option="INFERENCE_NUM_THREADS"),
}


def runtime_for(format: str) -> Runtime:
    if format not in RUNTIMES:
        raise UnknownFormatError(f"unknown model format '{format}'; this tfopt runs "
                                 f"{', '.join(RUNTIMES)}")
    return RUNTIMES[format]


def model_files(path: str | os.PathLike, format: str | None = None) -> list[Path]:
    """Every file of the model at ``path``: a SavedModel directory's files, or the model file
    and the files that belong with it (an OpenVINO IR's ``.bin``), those that exist. What its
    size and digest are taken over."""
    path = Path(path)
    if path.is_dir():
        return sorted((p for p in path.rglob("*") if p.is_file()),
                      key=lambda p: p.relative_to(path).as_posix())
    runtime = RUNTIMES.get(format or detect_format(path))
    companions = runtime.companions if runtime is not None else ()
    return [path, *(p for p in (path.with_suffix(s) for s in companions) if p.is_file())]


def detect_format(path: str | os.PathLike) -> str:
    """The format of a model handed over as a path: a file by its suffix, anything else a
    SavedModel directory (whose loader then says what is wrong with it).

    For models this package made or was given as a path; a registry version's format is read
    from what the version records (:mod:`tfopt.components.tracking.champion`), not from here.
    """
    suffix = Path(path).suffix
    for runtime in RUNTIMES.values():
        if runtime.suffix is not None and suffix == runtime.suffix:
            return runtime.format
    return "savedmodel"
