"""LiteRT (TensorFlow Lite) candidates: a SavedModel signature converted to a ``.tflite`` file.

:mod:`~optimizer.litert.convert` writes the flatbuffer in one of four flavours (fp32, fp16
weights, dynamic-range int8, full int8) with a JSON sidecar saying what it is and how to load
it (:mod:`~optimizer.litert.manifest`); :mod:`~optimizer.litert.runner` runs it through the
XNNPACK-delegated interpreter behind the same interface as a SavedModel, so the benchmark, the
equivalence check and the evaluation take either. ``optimizer.runner.load_runner`` picks it for
any path ending in ``.tflite``.

The interpreter comes from ``ai-edge-litert`` (the ``litert`` extra); TensorFlow is needed only
to convert.
"""

from __future__ import annotations

from pathlib import Path

LITERT_SUFFIX = ".tflite"


def is_litert_path(model) -> bool:
    """A path (str or PathLike) naming a ``.tflite`` file, existing or not."""
    try:
        return Path(model).suffix == LITERT_SUFFIX
    except TypeError:
        return False
