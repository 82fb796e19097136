"""LiteRT (TensorFlow Lite) candidates: a SavedModel signature converted to a ``.tflite`` file.

:mod:`~tfopt.optimizer.candidates.litert.convert` writes the flatbuffer in one of four flavours (fp32, fp16
weights, dynamic-range int8, full int8) with a JSON sidecar saying what it is and how to load
it (:mod:`~tfopt.optimizer.candidates.litert.manifest`). Running it is :mod:`tfopt.optimizer.runtime.litert`'s job,
behind the same interface as a SavedModel's runner.

The interpreter comes from ``ai-edge-litert`` (the ``litert`` extra); TensorFlow is needed only
to convert.
"""

from __future__ import annotations

LITERT_SUFFIX = ".tflite"

