"""Run a model in this process, whatever its format, behind one interface.

:func:`load_runner` gives a :class:`~tfopt.optimizer.runtime.base.ModelRunner` for a SavedModel
directory, a :class:`~tfopt.optimizer.model.frozen.FrozenModel`, or a model file of any format in
:data:`~tfopt.optimizer.runtime.registry.RUNTIMES`; each format's runtime is one module of this
package (:mod:`.tensorflow`, :mod:`.litert`, :mod:`.onnx`, :mod:`.openvino`), imported when
first needed. The benchmark, the equivalence check, the evaluation and runtime tuning go
through here only.
"""

from __future__ import annotations

import os

from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.model.signature import SignatureInfo
from tfopt.optimizer.runtime.base import (
    CorruptModelError,
    ModelRunner,
    RuntimeUnavailableError,
    UnknownFormatError,
)
from tfopt.optimizer.runtime.registry import RUNTIMES, Runtime, detect_format, runtime_for

Model = str | os.PathLike | FrozenModel | ModelRunner

__all__ = ["RUNTIMES", "CorruptModelError", "Model", "ModelRunner", "Runtime",
           "RuntimeUnavailableError", "UnknownFormatError", "detect_format", "load_runner",
           "read_signature", "runtime_for"]


def load_runner(model: Model, signature_name: str = DEFAULT_SIGNATURE, *,
                format: str | None = None, num_threads: int | None = None,
                policy: ScanPolicy = DEFAULT_POLICY) -> ModelRunner:
    """A runner for ``model``; ``format`` defaults to what the path looks like
    (:func:`~tfopt.optimizer.runtime.registry.detect_format`). ``num_threads`` applies where the
    runtime sets threads per model; None takes the CPUs this process may use. ``policy``: what
    a SavedModel may hold (:mod:`tfopt.optimizer.model.op_scan`), scanned before TensorFlow loads it."""
    if isinstance(model, ModelRunner):
        return model
    if isinstance(model, FrozenModel):
        from tfopt.optimizer.runtime.tensorflow import frozen_runner

        return frozen_runner(model)
    runtime = runtime_for(format or detect_format(model))
    return runtime.implementation().load_runner(model, signature_name, num_threads, policy)


def read_signature(model: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE, *,
                   format: str | None = None, policy: ScanPolicy = DEFAULT_POLICY
                   ) -> SignatureInfo:
    """The signature of a model on disk, read without running it (a SavedModel scanned under
    ``policy``)."""
    runtime = runtime_for(format or detect_format(model))
    return runtime.implementation().read_signature(model, signature_name, policy)
