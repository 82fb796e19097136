"""Run a ``.tflite`` signature in this process, with the interface of a SavedModel's runner.

The interpreter is ``ai_edge_litert``'s, whose default op resolver applies the XNNPACK delegate
when tensors are first allocated; :class:`LiteRTRunner` allocates at load and records whether a
delegate node appeared, so a result never claims XNNPACK when the model ran on the builtin
kernels. Threads default to the CPUs this process really has (affinity and cgroup quota, see
:mod:`optimizer.system.cpu_threads`): the interpreter's own default is one thread.

Batch size: a converted signature keeps the SavedModel's unknown batch dimension, but the
interpreter holds one set of tensor buffers, sized for one shape at a time. The signature runner
resizes the inputs and re-allocates before each call; when the shapes are those of the previous
call both return at once (no measurable cost per call), and a change (batch 1 in the benchmark,
64 in the evaluation, a short last batch) re-plans the buffers and XNNPACK's operators once. One
interpreter per shape would skip even that, but each would hold its own XNNPACK-packed copy of
the weights.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from optimizer.errors import (
    InvalidInputsError,
    SourceNotFoundError,
    UnknownSignatureError,
    first_line,
)
from optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from optimizer.model.savedmodel import DEFAULT_SIGNATURE
from optimizer.model.signature import SignatureInfo, TensorSpecInfo
from optimizer.runtime.base import (
    CorruptModelError,
    ModelRunner,
    RuntimeUnavailableError,
    thread_count,
)

_DELEGATE_NODE = "DELEGATE"  # the node that replaces each partition a delegate takes


class LiteRTUnavailableError(RuntimeUnavailableError):
    """The ``ai-edge-litert`` package is not installed."""


class CorruptLiteRTModelError(CorruptModelError):
    """A ``.tflite`` file the interpreter cannot read."""


def import_interpreter():
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise LiteRTUnavailableError(
            "running a .tflite model needs the ai-edge-litert package (pip install "
            "'tfopt[litert]')") from None
    return Interpreter


def _dtype_name(dtype) -> str:
    dtype = np.dtype(dtype)
    return "string" if dtype.kind in "OSU" else dtype.name


def _spec(key: str, details: dict) -> TensorSpecInfo:
    dims = details.get("shape_signature")
    if dims is None or len(dims) == 0 and len(details["shape"]) != 0:
        dims = details["shape"]
    shape = tuple(None if int(d) < 0 else int(d) for d in dims)
    return TensorSpecInfo(key=key, tensor_name=details["name"],
                          dtype=_dtype_name(details["dtype"]), shape=shape)


def litert_signature(interpreter, name: str, source: str = "") -> SignatureInfo:
    """The signature ``name`` of a loaded interpreter, keyed like the SavedModel it came from
    (the converter keeps the SavedModel signature's input and output keys)."""
    available = interpreter.get_signature_list()
    if name not in available:
        raise UnknownSignatureError(
            f"signature '{name}' not found in {source or 'the LiteRT model'}; available: "
            f"{', '.join(available) or 'none'}")
    runner = interpreter.get_signature_runner(name)
    inputs, outputs = runner.get_input_details(), runner.get_output_details()
    return SignatureInfo(
        name=name,
        inputs=tuple(_spec(k, inputs[k]) for k in sorted(inputs)),
        outputs=tuple(_spec(k, outputs[k]) for k in sorted(outputs)))


def _open_interpreter(path: Path, num_threads: int):
    if not path.exists():
        raise SourceNotFoundError(f"no such LiteRT model: {path}")
    if not path.is_file():
        raise CorruptLiteRTModelError(f"{path} is not a file: a LiteRT model is one .tflite")
    interpreter_class = import_interpreter()
    try:
        return interpreter_class(model_path=str(path), num_threads=num_threads)
    except (ValueError, RuntimeError) as exc:
        raise CorruptLiteRTModelError(
            f"cannot load LiteRT model {path}: {first_line(exc)}") from None


def read_litert_signature(path: str | os.PathLike,
                          signature_name: str = DEFAULT_SIGNATURE) -> SignatureInfo:
    """The signature of a ``.tflite`` file, read without allocating or running it."""
    return litert_signature(_open_interpreter(Path(path), 1), signature_name, str(path))


class LiteRTRunner(ModelRunner):
    """Calls one signature of a ``.tflite`` file; ``call`` is the hot path the benchmark times."""

    format = "tflite"
    runtime = "ai-edge-litert"

    def __init__(self, path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                 num_threads: int | None = None):
        path = Path(path)
        num_threads = thread_count(num_threads)
        self._interpreter = _open_interpreter(path, num_threads)
        try:
            self._interpreter.allocate_tensors()  # applies the XNNPACK delegate
        except (ValueError, RuntimeError) as exc:
            raise CorruptLiteRTModelError(
                f"cannot load LiteRT model {path}: {first_line(exc)}") from None
        signature = litert_signature(self._interpreter, signature_name, str(path))
        self.path = path
        self.num_threads = num_threads
        self.delegate_partitions = self._delegate_partitions()
        self.xnnpack = bool(self.delegate_partitions)
        if self.delegate_partitions is None:
            engine = "delegation unknown"
        elif self.delegate_partitions:
            engine = (f"XNNPACK delegate, {self.delegate_partitions} partition"
                      f"{'s' if self.delegate_partitions != 1 else ''}")
        else:
            engine = "builtin kernels, no delegate"
        super().__init__(signature, fn=self._interpreter.get_signature_runner(signature_name),
                         by_keyword=True,
                         description=f"LiteRT {path} ({engine}, num_threads={num_threads})")

    def _delegate_partitions(self) -> int | None:
        """Delegate nodes in the execution plan, through the wrapper's node list (no public
        API exposes it); None when this version of the wrapper has no such methods."""
        native = getattr(self._interpreter, "_interpreter", None)
        if not hasattr(native, "NumNodes") or not hasattr(native, "NodeName"):
            return None
        return sum(native.NodeName(i) == _DELEGATE_NODE for i in range(native.NumNodes()))

    def to_tensors(self, feeds: Mapping[str, np.ndarray]) -> list:
        self.check_feeds(feeds)
        tensors = []
        for spec in self.signature.inputs:
            array = np.asarray(feeds[spec.key], dtype=spec.numpy_dtype)
            if not array.flags.c_contiguous:  # (np.ascontiguousarray would make scalars 1-d)
                array = array.copy(order="C")
            if spec.shape is not None and (
                    array.ndim != len(spec.shape)
                    or any(d is not None and d != n for d, n in zip(spec.shape, array.shape))):
                raise InvalidInputsError(f"input '{spec.key}' has shape {list(array.shape)}; "
                                         f"the signature wants {spec.describe()}")
            tensors.append(array)
        return tensors

    # call() is ModelRunner's: the signature runner takes the inputs by keyword. It resizes
    # the inputs and re-allocates on every call, but the interpreter returns at once when the
    # shapes are unchanged (measured: no difference per call from resizing only on change), so
    # batch 1 in the benchmark and batches of 64 in the evaluation go through the same runner.

    def close(self) -> None:
        super().close()
        self._interpreter = None


def load_runner(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                num_threads: int | None = None, policy: ScanPolicy = DEFAULT_POLICY
                ) -> LiteRTRunner:
    return LiteRTRunner(path, signature_name, num_threads=num_threads)


def read_signature(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                   policy: ScanPolicy = DEFAULT_POLICY) -> SignatureInfo:
    return read_litert_signature(path, signature_name)
