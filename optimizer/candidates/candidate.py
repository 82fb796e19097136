"""A candidate: a model built from the source to be measured, and what it is.

This is the one candidate record of tfopt. The builders (:mod:`tfopt.optimizer.candidates.build`)
make one per model they write; the benchmark measures it, the gate judges it, the pipeline's
step records (:class:`tfopt.components.pipeline.artifacts.CandidateModel`, a candidate with its provenance)
and the published version's tags say it. What it is (``target``, ``variant``, ``format``,
``runtime``) is said by its fields, never guessed from its label: how much numeric precision
it gives up, for instance, is :attr:`Candidate.precision`, read from its variant.

Standard library only (pydantic when serialized), so the DAG file and the step records import
it without TensorFlow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# How much numeric precision a candidate gives up, from its variant: float32 as the input
# computes, a reduced float (fp16 weights, bfloat16 compute), or 8-bit integers.
FLOAT32, REDUCED_FLOAT, INT8 = "float32", "reduced_float", "int8"
PRECISION_ORDER = (FLOAT32, REDUCED_FLOAT, INT8)
VARIANT_PRECISION = {
    "fp32": FLOAT32, "xla": FLOAT32, "optimized": FLOAT32,  # SavedModel variants, ONNX/LiteRT
    "bf16": REDUCED_FLOAT, "fp16": REDUCED_FLOAT,
    "dynamic_int8": INT8, "full_int8": INT8, "static_int8": INT8, "int8": INT8,
    "mixed_int8": INT8,  # int8 but for the layers a precision search kept in float
}


@dataclass(frozen=True)
class Candidate:
    """A model to measure: what it is, where it is, what runs it."""

    label: str
    target: str  # one of tfopt.optimizer.candidates.build.TARGETS
    variant: str  # fp32, bf16, xla, or the LiteRT, ONNX or OpenVINO flavour
    format: str  # savedmodel | tflite | onnx | openvino (tfopt.optimizer.runtime.registry)
    runtime: str  # tensorflow | tensorflow+xla | ai-edge-litert | onnxruntime | openvino
    path: str  # the SavedModel directory, or the model file (.tflite, .onnx, .xml)
    how_to_load: str
    calibration: str | None = None  # int8 calibrated on: "data" | "synthetic"; else None
    # mixed int8: the layers a precision search kept in float (tfopt.optimizer.search.precision)
    float_layers: tuple[str, ...] = ()

    @property
    def artifact_dir(self) -> Path:
        """The directory that holds everything of this candidate (what gets published)."""
        return artifact_dir(self.path, self.format)

    @property
    def precision(self) -> str:
        """:data:`FLOAT32`, :data:`REDUCED_FLOAT` or :data:`INT8`, by its variant."""
        return VARIANT_PRECISION.get(self.variant, FLOAT32)

    def to_dict(self) -> dict:
        from tfopt.optimizer.records import record_to_dict

        return record_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Candidate:
        from tfopt.optimizer.records import record_from_dict

        return record_from_dict(cls, data)


@dataclass(frozen=True)
class Skipped:
    """A candidate that was not built, and the one-line reason."""

    label: str
    reason: str

    def to_dict(self) -> dict:
        from tfopt.optimizer.records import record_to_dict

        return record_to_dict(self)


def artifact_dir(path: str | os.PathLike, format: str) -> Path:
    """A model file's directory (it holds the sidecar and companions), or a SavedModel itself."""
    from tfopt.optimizer.runtime.registry import runtime_for

    path = Path(path)
    return path.parent if runtime_for(format).suffix is not None else path
