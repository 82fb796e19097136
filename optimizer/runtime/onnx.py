"""Run an ``.onnx`` model in this process with ONNX Runtime's CPU provider, behind the interface
of a SavedModel's runner.

Signature: an ONNX graph has named inputs and outputs but no signature name; a model tfopt
converted names them by the SavedModel signature's keys (:mod:`tfopt.optimizer.candidates.onnx.convert`), so the
signature here is the graph's inputs and outputs under the name asked for, keyed like the
SavedModel's and sorted the same way.

Session options: the model's sidecar (:mod:`tfopt.optimizer.model.sidecar`) may say how it must run, e.g.
the optimization level a model saved already optimized is loaded with; a model without one runs
with ONNX Runtime's defaults (every graph optimization at load).

Threads: ``intra_op_num_threads`` per session, default the CPUs this process really has
(affinity and cgroup quota, :mod:`tfopt.optimizer.system.cpu_threads`); one inter-op thread and
sequential execution, as a latency-bound server runs it. With more than one thread the pool's
workers spin between calls, as ONNX Runtime's default has them do: a worker put to sleep after
every call is woken for each of the next call's ops, which costs more than the second thread
saves on a small model. Measured on the BiLSTM tagger at batch 1, each setting alone in a quiet
process: 2 threads spinning 93 us a call, 1 thread 118 us, 2 threads not spinning 162 us. After
a call a spinning worker runs on for ~30 ms, so the benchmark waits for it to stop before the
next model's block (``spins_after_call``, :mod:`tfopt.optimizer.benchmark.idle`), and runtime tuning
measures each thread count in a process of its own, where a count that only spins on a busy
machine loses. A server that must not spend CPU between requests sets
``session.intra_op.allow_spinning`` to 0.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tfopt.optimizer.errors import SourceNotFoundError, first_line
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.model.sidecar import runtime_options
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.runtime.base import CorruptModelError, ModelRunner, thread_count

FORMAT = "onnx"
PROVIDER = "CPUExecutionProvider"
# ONNX's tensor element types as ORT names them, to the signature's dtype names.
_DTYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16", "tensor(int8)": "int8", "tensor(int16)": "int16",
    "tensor(int32)": "int32", "tensor(int64)": "int64", "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16", "tensor(uint32)": "uint32", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool", "tensor(string)": "string",
}
_LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")


class CorruptOnnxModelError(CorruptModelError):
    """An ``.onnx`` file ONNX Runtime cannot load."""


def _spec(arg) -> TensorSpecInfo:
    shape = None if arg.shape is None else tuple(
        d if isinstance(d, int) and d >= 0 else None for d in arg.shape)
    return TensorSpecInfo(key=arg.name, tensor_name=arg.name,
                          dtype=_DTYPES.get(arg.type, arg.type), shape=shape)


def session_signature(session, name: str) -> SignatureInfo:
    """The session's inputs and outputs as the signature ``name``, sorted by key."""
    return SignatureInfo(
        name=name,
        inputs=tuple(sorted((_spec(a) for a in session.get_inputs()), key=lambda s: s.key)),
        outputs=tuple(sorted((_spec(a) for a in session.get_outputs()), key=lambda s: s.key)))


def spins(num_threads: int) -> bool:
    """Whether a session of ``num_threads`` keeps its workers spinning: where there is a pool."""
    return num_threads > 1


def spinning_config(num_threads: int) -> dict[str, str]:
    """The session config entry that says so, as ORT and MLflow's onnx flavor take it."""
    return {"session.intra_op.allow_spinning": "1" if spins(num_threads) else "0"}


def session_options(num_threads: int, options: Mapping | None = None):
    """ORT session options: ``num_threads`` intra-op threads, spinning when there is more
    than one (see the module docstring), and what the sidecar's ``options`` ask for
    (``graph_optimization_level``)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = num_threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    for key, value in spinning_config(num_threads).items():
        so.add_session_config_entry(key, value)
    level = (options or {}).get("graph_optimization_level")
    if level is not None:
        if level not in _LEVELS:
            raise CorruptOnnxModelError(f"unknown graph_optimization_level '{level}' in the "
                                        f"sidecar; one of {', '.join(_LEVELS)}")
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    return so


def open_session(path: Path, num_threads: int, options: Mapping | None = None):
    """An ORT session on ``path``, every load failure a one-line :class:`CorruptOnnxModelError`."""
    import onnxruntime as ort

    if not path.exists():
        raise SourceNotFoundError(f"no such ONNX model: {path}")
    if not path.is_file():
        raise CorruptOnnxModelError(f"{path} is not a file: an ONNX model is one .onnx")
    try:
        return ort.InferenceSession(str(path), session_options(num_threads, options),
                                    providers=[PROVIDER])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own types for a bad file
        raise CorruptOnnxModelError(f"cannot load ONNX model {path}: {first_line(exc)}"
                                    ) from None


def _as_text(array: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else str(v),
                        otypes=[object])(array)


class OnnxRunner(ModelRunner):
    """Calls an ``.onnx`` model's graph as the signature ``signature_name``."""

    format = FORMAT
    runtime = "onnxruntime"

    def __init__(self, path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                 num_threads: int | None = None):
        path = Path(path)
        num_threads = thread_count(num_threads)
        options = runtime_options(path, FORMAT)
        self._session = open_session(path, num_threads, options)
        signature = session_signature(self._session, signature_name)
        self.path = path
        self.options = options
        # What the session really runs with, as ORT reads it back.
        self.num_threads = self._session.get_session_options().intra_op_num_threads
        self.spins_after_call = spins(self.num_threads)
        self._output_keys = signature.output_keys
        level = options.get("graph_optimization_level", "ORT_ENABLE_ALL (default)")
        super().__init__(signature, fn=self._session.run, by_keyword=False,
                         description=f"ONNX Runtime {path} ({PROVIDER}, {level}, "
                                     f"intra_op_num_threads={self.num_threads}"
                                     f"{', spinning' if self.spins_after_call else ''})")

    def to_tensors(self, feeds: Mapping[str, np.ndarray]) -> list:
        # ONNX Runtime reads each element of a string tensor as str: bytes would be looked up
        # as their repr ("b'tok'") and miss every key of a table (tf2onnx's CategoryMapper).
        return [_as_text(t) if spec.dtype == "string" else t
                for spec, t in zip(self.signature.inputs, super().to_tensors(feeds))]

    def call(self, tensors: list):
        return self._fn(self._output_keys, dict(zip(self.signature.input_keys, tensors)))

    def bind(self, tensors: list):
        run, keys, feeds = self._fn, self._output_keys, dict(zip(self.signature.input_keys,
                                                                 tensors))
        return lambda: run(keys, feeds)

    def outputs(self, raw) -> dict[str, np.ndarray]:
        return dict(zip(self._output_keys, raw))

    def close(self) -> None:
        super().close()
        self._session = None


def load_runner(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                num_threads: int | None = None, policy: ScanPolicy = DEFAULT_POLICY
                ) -> OnnxRunner:
    return OnnxRunner(path, signature_name, num_threads=num_threads)


def read_signature(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                   policy: ScanPolicy = DEFAULT_POLICY) -> SignatureInfo:
    """The inputs and outputs of an ``.onnx`` file: a session on one thread that optimizes
    nothing and is never called."""
    path = Path(path)
    options = {**runtime_options(path, FORMAT), "graph_optimization_level": "ORT_DISABLE_ALL"}
    return session_signature(open_session(path, 1, options), signature_name)
