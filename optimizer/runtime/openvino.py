"""Run an OpenVINO IR (``model.xml`` with its ``model.bin``) on OpenVINO's CPU plugin, behind the
interface of a SavedModel's runner.

Signature: the IR's inputs and outputs by tensor name; a model tfopt converted keeps the
SavedModel signature's keys as those names (:mod:`tfopt.optimizer.candidates.openvino.convert`), sorted the same
way as a SavedModel's.

Compile options: the model's sidecar (:mod:`tfopt.optimizer.model.sidecar`) says what the CPU plugin must
be told, and the runner passes exactly that; above all ``INFERENCE_PRECISION_HINT``, which
decides whether float ops run in float32 or bfloat16. The IR cannot carry it: the plugin does
not read a precision from the model's ``rt_info`` (tried with 2026.4), and on a CPU with native
bfloat16 its default is bf16, so an IR compiled without the hint would not run as the fp32
candidate that was measured. An IR without a sidecar runs with the plugin's defaults.

Threads: ``INFERENCE_NUM_THREADS`` per compiled model, default the CPUs this process really has
(affinity and cgroup quota, :mod:`tfopt.optimizer.system.cpu_threads`), with the ``LATENCY``
performance hint (one stream), as a server answering one request at a time runs it; the count
in effect is read back from the compiled model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tfopt.optimizer.errors import SourceNotFoundError
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.model.sidecar import runtime_options
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.runtime.base import CorruptModelError, ModelRunner, thread_count
from tfopt.optimizer.system.native_output import captured_native_output

FORMAT = "openvino"
DEVICE = "CPU"
_NOISE = ("Exception from ", "Check '", "FrontEnd API failed with")


class CorruptOpenVINOModelError(CorruptModelError):
    """An IR OpenVINO cannot read or compile."""


def condense_openvino_error(message: str) -> str:
    """The line of an OpenVINO exception that says what is wrong: its messages open with the
    C++ source locations that raised them."""
    lines = [line.strip() for line in message.splitlines()]
    for line in lines:
        if "No conversion rule found for operations:" in line:
            return "no OpenVINO conversion rule for: " + line.split(":", 1)[1].strip()
    meaningful = [line for line in lines if line and not line.startswith(_NOISE)]
    return meaningful[0][:300] if meaningful else "no reason given"


def _spec(port) -> TensorSpecInfo:
    name = port.get_any_name()
    shape = port.get_partial_shape()
    dims = None if shape.rank.is_dynamic else tuple(
        d.get_length() if d.is_static else None for d in shape)
    dtype = port.get_element_type()
    dtype_name = "bfloat16" if dtype.get_type_name() == "bf16" else np.dtype(
        dtype.to_dtype()).name
    return TensorSpecInfo(key=name, tensor_name=name, dtype=dtype_name, shape=dims)


def model_signature(model, name: str) -> SignatureInfo:
    """An OpenVINO model's (or compiled model's) inputs and outputs as the signature ``name``."""
    return SignatureInfo(
        name=name,
        inputs=tuple(sorted((_spec(p) for p in model.inputs), key=lambda s: s.key)),
        outputs=tuple(sorted((_spec(p) for p in model.outputs), key=lambda s: s.key)))


def read_ir(path: Path):
    """The IR at ``path``, every failure a one-line :class:`CorruptOpenVINOModelError`."""
    import openvino as ov

    if not path.exists():
        raise SourceNotFoundError(f"no such OpenVINO model: {path}")
    if not path.is_file():
        raise CorruptOpenVINOModelError(f"{path} is not a file: an OpenVINO IR is a .xml with "
                                        f"its .bin")
    if not path.with_suffix(".bin").is_file():
        raise CorruptOpenVINOModelError(f"cannot load OpenVINO model {path}: its weights "
                                        f"{path.with_suffix('.bin').name} are missing")
    # On a file that is not an IR, OpenVINO tries its other frontends, which log to fd 2.
    with captured_native_output():
        try:
            return ov.Core().read_model(str(path))
        except RuntimeError as exc:
            reason = condense_openvino_error(str(exc))
    raise CorruptOpenVINOModelError(f"cannot load OpenVINO model {path}: {reason}")


def compile_config(num_threads: int, options: Mapping | None = None) -> dict:
    """The CPU plugin's properties: the sidecar's ``options`` (the precision hint), then the
    thread count and the latency hint."""
    return {**(options or {}), "INFERENCE_NUM_THREADS": num_threads,
            "PERFORMANCE_HINT": "LATENCY"}


class OpenVINORunner(ModelRunner):
    """Calls an OpenVINO IR as the signature ``signature_name``, through one infer request."""

    format = FORMAT
    runtime = "openvino"

    def __init__(self, path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                 num_threads: int | None = None):
        import openvino as ov

        path = Path(path)
        num_threads = thread_count(num_threads)
        options = runtime_options(path, FORMAT)
        model = read_ir(path)
        signature = model_signature(model, signature_name)
        try:
            self._compiled = ov.Core().compile_model(model, DEVICE,
                                                     compile_config(num_threads, options))
        except RuntimeError as exc:
            raise CorruptOpenVINOModelError(
                f"cannot compile OpenVINO model {path} for {DEVICE}: "
                f"{condense_openvino_error(str(exc))}") from None
        self._request = self._compiled.create_infer_request()
        self.path = path
        self.options = options
        self.num_threads = int(self._compiled.get_property("INFERENCE_NUM_THREADS"))
        self.inference_precision = str(
            self._compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())
        self._output_keys = [p.get_any_name() for p in self._compiled.outputs]
        super().__init__(signature, fn=self._request.infer, by_keyword=False,
                         description=f"OpenVINO {path} ({DEVICE}, inference precision "
                                     f"{self.inference_precision}, "
                                     f"INFERENCE_NUM_THREADS={self.num_threads})")

    def call(self, tensors: list):
        return self._fn(dict(zip(self.signature.input_keys, tensors)), share_inputs=True)

    def bind(self, tensors: list):
        infer, feeds = self._fn, dict(zip(self.signature.input_keys, tensors))
        return lambda: infer(feeds, share_inputs=True)

    def outputs(self, raw) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in zip(self._output_keys, raw.to_tuple())}

    def close(self) -> None:
        super().close()
        self._request = None
        self._compiled = None


def load_runner(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                num_threads: int | None = None, policy: ScanPolicy = DEFAULT_POLICY
                ) -> OpenVINORunner:
    return OpenVINORunner(path, signature_name, num_threads=num_threads)


def read_signature(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                   policy: ScanPolicy = DEFAULT_POLICY) -> SignatureInfo:
    """The inputs and outputs of an IR, read without compiling it."""
    path = Path(path)
    runtime_options(path, FORMAT)  # a broken sidecar is a broken model
    return model_signature(read_ir(path), signature_name)
