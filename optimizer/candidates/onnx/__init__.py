"""ONNX candidates: a SavedModel signature converted by tf2onnx, for ONNX Runtime on the CPU.

:mod:`~tfopt.optimizer.candidates.onnx.convert` writes ``model.onnx`` in one of four flavours (as converted,
optimized offline by ONNX Runtime, dynamic int8, static int8 calibrated) with its JSON sidecar
(:mod:`tfopt.optimizer.model.sidecar`). Running it is :mod:`tfopt.optimizer.runtime.onnx`'s job, behind the same
interface as a SavedModel's runner.

Converting needs the ``onnx`` extra (tf2onnx, onnx, onnxruntime); running needs only
``onnxruntime``.
"""

from __future__ import annotations

ONNX_SUFFIX = ".onnx"
