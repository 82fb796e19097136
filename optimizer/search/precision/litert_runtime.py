"""The precision search's view of a model in LiteRT: full int8 with selected ops kept in float.

- **Mixed models**: the SavedModel converted once with calibration only (the float model with
  its activation ranges recorded, as the quantization debugger converts it), then quantized by
  ``mlir_quantize`` with the float layers as ``denylisted_nodes``: each build is seconds, no
  calibration (:func:`tfopt.optimizer.candidates.litert.convert.quantize_calibrated`).
- **Layers**: the ops of the calibrated model that compute (fully connected, convolutions,
  element-wise arithmetic, pooling, softmax...), named by their first output tensor as
  ``denylisted_nodes`` names them.
- **Costs** (:class:`~tfopt.optimizer.search.precision.measure.EndToEndLayerCosts`): LiteRT has no
  per-op timer to call from Python, so a layer's float cost is measured end to end: the model
  with only that layer in float against uniform int8, interleaved in blocks at batch 1 on one
  thread (what keeping it in float costs, its boundaries included; int8 is the reference, 0).
  Boundaries are therefore not costed apart (0): the relaxed search's merges get no credit
  here, only its latency-aware fallbacks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tfopt.optimizer.search.precision.table import INPUT, OUTPUT

log = logging.getLogger(__name__)

COMPUTE_OPS = frozenset({
    "ADD", "AVERAGE_POOL_2D", "BATCH_MATMUL", "CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D",
    "FULLY_CONNECTED", "L2_NORMALIZATION", "LOGISTIC", "MAX_POOL_2D", "MEAN", "MUL", "SOFTMAX",
    "SUB", "TANH", "TRANSPOSE_CONV"})
COST_SECONDS = 1.5  # end-to-end timing of the single-fallback models, interleaved


class LiteRTPrecisionModel:
    """A SavedModel calibrated once for LiteRT, from which any assignment's mixed model is
    built under ``work``; ``prepared`` is the float reference (the calibrated model runs in
    float)."""

    suffix = ".tflite"
    format = "tflite"

    def __init__(self, saved_model: Path, signature: str,
                 feeds: Sequence[Mapping[str, np.ndarray]], work: Path):
        from tfopt.optimizer.candidates.conversion import run_converter
        from tfopt.optimizer.candidates.litert.convert import calibrate_only
        from tfopt.optimizer.runtime.litert import import_interpreter
        from tfopt.optimizer.tf_runtime import import_tensorflow

        tf = import_tensorflow()
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.signature = signature

        def calibrate() -> bytes:
            converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model),
                                                                 signature_keys=[signature])
            calibrate_only(tf, converter, [dict(f) for f in feeds])
            return converter.convert()

        self.calibrated = run_converter(calibrate, f"cannot calibrate {saved_model} for LiteRT",
                                        "LiteRT calibration (precision search)")
        self.prepared = self.work / "calibrated.tflite"
        self.prepared.write_bytes(self.calibrated)
        interpreter = import_interpreter()(model_content=self.calibrated)
        names = {t["index"]: t["name"] for t in interpreter.get_tensor_details()}
        self._ops = [(op["op_name"], [names[i] for i in op["inputs"] if i >= 0],
                      [names[i] for i in op["outputs"]])
                     for op in interpreter._get_ops_details()]  # no public list of ops
        self._inputs = {names[d["index"]] for d in interpreter.get_input_details()}
        self._outputs = {names[d["index"]] for d in interpreter.get_output_details()}
        self.layers = tuple(outputs[0] for op, _, outputs in self._ops if op in COMPUTE_OPS)
        self._built = 0

    def build(self, float_layers: Sequence[str] = (), only: Sequence[str] | None = None,
              dst: Path | None = None) -> Path:
        from tfopt.optimizer.candidates.conversion import run_converter
        from tfopt.optimizer.candidates.litert.convert import quantize_calibrated

        denied = (tuple(float_layers) if only is None
                  else tuple(n for n in self.layers if n not in set(only)))
        self._built += 1
        dst = dst or self.work / f"assignment_{self._built}.tflite"
        dst.write_bytes(run_converter(lambda: quantize_calibrated(self.calibrated, denied),
                                      "cannot quantize for the precision search",
                                      "LiteRT mlir_quantize (precision search)"))
        return dst

    def edges(self) -> list[tuple[str, str, str]]:
        """(producer, consumer, tensor) between layers, through the ops that are not layers."""
        layers = set(self.layers)
        producer = {out: (outputs[0], inputs) for _, inputs, outputs in self._ops
                    for out in outputs}

        def source(tensor: str, depth: int = 0) -> str | None:
            if tensor in self._inputs:
                return INPUT
            if tensor not in producer or depth > 50:
                return None
            name, inputs = producer[tensor]
            if name in layers:
                return name
            found = [s for s in (source(t, depth + 1) for t in inputs) if s is not None]
            return found[0] if found else None

        edges = []
        for _, inputs, outputs in self._ops:
            if outputs[0] in layers:
                edges += [(s, outputs[0], t) for t in inputs
                          if (s := source(t)) is not None]
        edges += [(s, OUTPUT, t) for t in self._outputs
                  if (s := source(t)) not in (None, INPUT)]
        return list(dict.fromkeys(edges))
