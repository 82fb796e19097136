"""OpenVINO candidates: a SavedModel signature converted to OpenVINO's IR for its CPU plugin.

:mod:`~tfopt.optimizer.candidates.openvino.convert` writes ``model.xml`` and ``model.bin`` in one of three
flavours (float32, the CPU's bfloat16 inference precision, int8 calibrated by NNCF) with its
JSON sidecar (:mod:`tfopt.optimizer.model.sidecar`), which also holds the precision hint the runner compiles
with. Running it is :mod:`tfopt.optimizer.runtime.openvino`'s job, behind the same interface as a
SavedModel's runner.

Converting needs the ``openvino`` extra (openvino, nncf); running needs only ``openvino``.
"""

from __future__ import annotations

IR_SUFFIX = ".xml"
WEIGHTS_SUFFIX = ".bin"
