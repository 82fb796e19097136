"""Run a ``.tflite`` signature in this process, with the interface of a SavedModel's runner.

The interpreter is ``ai_edge_litert``'s, whose default op resolver applies the XNNPACK delegate
when tensors are first allocated; :class:`LiteRTRunner` allocates at load and records whether a
delegate node appeared, so a result never claims XNNPACK when the model ran on the builtin
kernels. Threads default to the CPUs this process really has (affinity and cgroup quota, see
:mod:`tfopt.optimizer.system.cpu_threads`): the interpreter's own default is one thread.

Calls go through :class:`SignatureCall`, not the interpreter's ``SignatureRunner``: the same
native calls (set each input, invoke, copy each output out) with the tensor indices resolved
once, and without the runner's per-call resize and re-allocation, keyword dict and checks. For a
model that runs in a few microseconds that is most of a call: on the StringLookup classifier of
``benchmarks/families.py`` at 2 threads, 3.25 us a call this way and 6.89 us through the
``SignatureRunner`` (``benchmarks/litert_calls.py``, both kinds of call on two models in one
process). The outputs are copies (the wrapper's ``GetTensor`` copies out of the interpreter's
buffers), so a later call never overwrites what an earlier one returned.

Batch size: a converted signature keeps the SavedModel's unknown batch dimension, but the
interpreter holds one set of tensor buffers, sized for one shape at a time. A call whose input
shapes differ from the ones the buffers were last sized for (batch 1 in the benchmark, 64 in the
evaluation, a short last batch) resizes the inputs and re-allocates first, which re-plans the
buffers and XNNPACK's operators once; calls at the same shapes skip it. One interpreter per shape
would skip even that, but each would hold its own XNNPACK-packed copy of the weights.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tfopt.optimizer.errors import (
    InvalidInputsError,
    SourceNotFoundError,
    UnknownSignatureError,
    first_line,
)
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.runtime.base import (
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


class SignatureCall:
    """One signature of a loaded interpreter, called through the native wrapper the
    interpreter's ``SignatureRunner`` calls, with its tensor indices resolved once.

    ``call(tensors)`` takes the inputs in ``input_keys`` order (arrays of the signature's
    dtypes, C-contiguous) and returns ``{output key: array}``, each array a copy; ``bind``
    fixes the inputs. It takes the interpreter's input shapes to be what its own last call
    left, so nothing else may resize them: one per interpreter, and no other calls on it."""

    def __init__(self, interpreter, name: str, input_keys: list[str]):
        native = interpreter._interpreter  # what SignatureRunner calls; no public handle
        runner = interpreter.get_signature_runner(name)
        inputs = runner.get_input_details()
        self._native = native
        self._subgraph = native.GetSubgraphIndexFromSignature(name)
        self._inputs = tuple(int(inputs[k]["index"]) for k in input_keys)
        self._outputs = tuple((k, int(d["index"]))
                              for k, d in sorted(runner.get_output_details().items()))
        self._shapes: tuple | None = None  # what the buffers are sized for; None: unknown

    def _resize(self, shapes: tuple) -> None:
        native, subgraph = self._native, self._subgraph
        if shapes != self._shapes:
            for index, shape in zip(self._inputs, shapes):
                native.ResizeInputTensor(index, np.array(shape, dtype=np.int32), False,
                                         subgraph)
            native.AllocateTensors(subgraph)
        self._shapes = shapes

    def call(self, tensors) -> dict[str, np.ndarray]:
        shapes = tuple(t.shape for t in tensors)
        if shapes is not self._shapes:
            self._resize(shapes)
        native, subgraph = self._native, self._subgraph
        for index, value in zip(self._inputs, tensors):
            native.SetTensor(index, value, subgraph)
        native.Invoke(subgraph)
        return {key: native.GetTensor(index, subgraph) for key, index in self._outputs}

    def bind(self, tensors):
        """``call`` with ``tensors`` fixed: a callable of no arguments, as lean as a call by
        hand can be (the shape check is one identity test)."""
        tensors = tuple(tensors)
        shapes = tuple(t.shape for t in tensors)
        resize, subgraph = self._resize, self._subgraph
        set_tensor, invoke, get_tensor = (self._native.SetTensor, self._native.Invoke,
                                          self._native.GetTensor)
        if len(tensors) == 1 and len(self._outputs) == 1:  # the common case, without loops
            [index], [value], [(key, output)] = self._inputs, tensors, self._outputs

            def bound_one():
                if self._shapes is not shapes:
                    resize(shapes)
                set_tensor(index, value, subgraph)
                invoke(subgraph)
                return {key: get_tensor(output, subgraph)}

            return bound_one
        pairs, outputs = tuple(zip(self._inputs, tensors)), self._outputs

        def bound():
            if self._shapes is not shapes:
                resize(shapes)
            for index, value in pairs:
                set_tensor(index, value, subgraph)
            invoke(subgraph)
            return {key: get_tensor(output, subgraph) for key, output in outputs}

        return bound


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
        self._signature_call = SignatureCall(self._interpreter, signature_name,
                                             signature.input_keys)
        super().__init__(signature, fn=self._signature_call.call, by_keyword=False,
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

    def call(self, tensors: list) -> dict[str, np.ndarray]:
        return self._signature_call.call(tensors)

    def bind(self, tensors: list):
        return self._signature_call.bind(tensors)

    def close(self) -> None:
        super().close()
        self._interpreter = self._signature_call = None


def load_runner(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                num_threads: int | None = None, policy: ScanPolicy = DEFAULT_POLICY
                ) -> LiteRTRunner:
    return LiteRTRunner(path, signature_name, num_threads=num_threads)


def read_signature(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                   policy: ScanPolicy = DEFAULT_POLICY) -> SignatureInfo:
    return read_litert_signature(path, signature_name)
