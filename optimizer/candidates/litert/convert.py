"""Convert a SavedModel signature to a LiteRT ``.tflite`` file, in one of four flavours.

- ``fp32``: float32 throughout; the graph as the converter lowers it to LiteRT builtins.
- ``fp16``: float16 weights (half the size), dequantized to float32 when the model is loaded;
  compute stays float32.
- ``dynamic_int8``: int8 weights; activations are quantized on the fly, per op, from their
  observed range (dynamic range quantization). No data needed.
- ``full_int8``: int8 weights and activations, with activation ranges calibrated on
  representative data (feed dicts of inputs, :mod:`tfopt.optimizer.inputs.calibration`). The interface
  stays float32 (quantize at the input, dequantize at the output) so the serving signature is
  the SavedModel's. ``supported_ops`` is ``TFLITE_BUILTINS_INT8`` *plus* ``TFLITE_BUILTINS``:
  an op with no int8 kernel falls back to float between a dequantize and a quantize instead of
  failing the whole conversion. The candidate may then be slower than a pure int8 model, but
  it exists, and the gate measures its speed and accuracy like any other's.

Select TF ops (Flex) are never enabled: they need the full TF runtime linked into the
interpreter, which is what a LiteRT candidate exists to avoid. A model with such an op fails to
convert with a one-line :class:`LiteRTConversionError` naming the ops.

The converter writes pages of MLIR diagnostics and native log lines to file descriptor 2; they
are captured while it runs (with its Python warnings) and go to this module's logger at DEBUG.
On failure the first meaningful error line becomes the exception's message and the whole output
is kept on the exception as ``details``. ``TFOPT_NATIVE_LOGS=1`` lets the native output through
untouched, as for the CLI.

The ``.tflite`` is written to a hidden sibling and renamed into place, then its sidecar
(:mod:`tfopt.optimizer.candidates.litert.manifest`) the same way; a failure leaves neither.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfopt.optimizer.candidates.litert import LITERT_SUFFIX
from tfopt.optimizer.candidates.litert.manifest import Manifest, manifest_path, write_manifest
from tfopt.optimizer.errors import DestinationError, InvalidInputsError, TfoptError
from tfopt.optimizer.files.atomic import atomic_file, check_file_writable
from tfopt.optimizer.inputs.calibration import checked_feeds
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE, get_signature
from tfopt.optimizer.model.signature import SignatureInfo, contract_difference
from tfopt.optimizer.system.native_output import captured_native_output

log = logging.getLogger(__name__)

FLAVOURS: dict[str, str] = {
    "fp32": "float32 weights and activations",
    "fp16": "float16 weights, dequantized to float32 at load; float32 compute",
    "dynamic_int8": "int8 weights; activations quantized per op at run time (dynamic range)",
    "full_int8": "int8 weights and activations calibrated on representative data; float32 "
                 "inputs and outputs; ops without an int8 kernel stay float",
    "mixed_int8": "full_int8 with the ops a precision search chose kept in float32 "
                  "(denylisted nodes, as the quantization debugger denylists them; the "
                  "converter options' float_nodes name them)",
}
CALIBRATING = ("full_int8", "mixed_int8")
DEFAULT_CALIBRATION_SAMPLES = 100
_MAX_REASON = 300


class LiteRTConversionError(TfoptError):
    """The converter could not turn this model into this flavour (a stated reason, one line)."""

    exit_code = 4  # like TransformFailed: valid input, but this candidate cannot be produced

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class LiteRTModel:
    path: Path
    manifest_path: Path
    manifest: Manifest


# --- what went wrong, in one line -------------------------------------------------------------

_SELECT_OPS = re.compile(r"^TF Select ops: (.+)$", re.MULTILINE)
_CUSTOM_OPS = re.compile(r"^Custom ops: (.+)$", re.MULTILINE)
_ERROR = re.compile(r"\berror: (.*)$", re.MULTILINE)


def _strip_locations(text: str) -> str:
    """Drop MLIR ``loc(...)`` prefixes (nested parentheses) and a trailing ``:``."""
    while True:
        start = text.find("loc(")
        if start < 0:
            break
        depth, end = 0, start + 3
        for end in range(start + 3, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = (text[:start] + text[end + 1:]).lstrip(": ")
    return text.strip().rstrip(":").strip()


def condense_converter_error(message: str) -> str:
    """The first line of a converter error that says what is wrong, without MLIR locations."""
    if match := _SELECT_OPS.search(message):
        return (f"ops with no LiteRT builtin kernel: {match.group(1).strip()} (they would need "
                f"TF Select ops, which LiteRT candidates do not use)")
    if match := _CUSTOM_OPS.search(message):
        return f"ops with no LiteRT kernel (custom ops): {match.group(1).strip()}"
    for match in _ERROR.finditer(message):
        reason = _strip_locations(match.group(1))
        if reason and not reason.startswith("failed while converting"):
            return reason[:_MAX_REASON]
    lines = [_strip_locations(line) for line in message.splitlines()]
    return next((line[:_MAX_REASON] for line in lines if line), "no reason given")


# --- calibration data ------------------------------------------------------------------------

def calibration_feeds(signature: SignatureInfo, x: np.ndarray,
                      samples: int = DEFAULT_CALIBRATION_SAMPLES) -> list[dict[str, np.ndarray]]:
    """One-row feed dicts for a single-input signature, from the first ``samples`` rows of
    ``x`` (the eval data's inputs)."""
    if len(signature.inputs) != 1:
        raise InvalidInputsError(
            f"calibration rows feed one input; signature '{signature.name}' has "
            f"{len(signature.inputs)}: give feed dicts instead")
    spec = signature.inputs[0]
    x = np.asarray(x)[:samples].astype(spec.numpy_dtype, copy=False)
    return [{spec.key: x[i:i + 1]} for i in range(len(x))]


# --- conversion -------------------------------------------------------------------------------

def calibrate_only(tf, converter, feeds: list) -> None:
    """Make ``converter.convert()`` return the float model with the activation ranges
    calibrated on ``feeds`` recorded, for :func:`quantize_calibrated` (the quantization
    debugger's way)."""
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: iter(feeds)
    converter.experimental_mlir_quantizer = True
    converter._experimental_calibrate_only = True  # as the quantization debugger sets it


def quantize_calibrated(calibrated: bytes, float_nodes=()) -> bytes:
    """A calibrated model (:func:`calibrate_only`) quantized to int8 with float32 inputs and
    outputs, the ops whose first output is named in ``float_nodes`` kept in float32."""
    from tensorflow.lite.python import convert

    with captured_native_output():
        return convert.mlir_quantize(calibrated, disable_per_channel=False,
                                     fully_quantize=False,
                                     denylisted_nodes=list(float_nodes) or None)


def _configure(tf, converter, flavour: str, feeds: list | None) -> dict:
    """Set the flavour's options; return them as recorded in the sidecar."""
    if flavour == "fp32":
        return {"optimizations": [], "supported_ops": ["TFLITE_BUILTINS"]}
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if flavour == "fp16":
        converter.target_spec.supported_types = [tf.float16]
        return {"optimizations": ["DEFAULT"], "supported_types": ["float16"],
                "supported_ops": ["TFLITE_BUILTINS"]}
    if flavour == "dynamic_int8":
        return {"optimizations": ["DEFAULT"], "supported_ops": ["TFLITE_BUILTINS"]}
    if flavour == "mixed_int8":
        calibrate_only(tf, converter, feeds)
        return {"optimizations": ["DEFAULT"], "quantizer": "mlir_quantize",
                "inference_input_type": "float32", "inference_output_type": "float32"}
    converter.representative_dataset = lambda: iter(feeds)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                           tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.inference_input_type = tf.float32
    converter.inference_output_type = tf.float32
    return {"optimizations": ["DEFAULT"],
            "supported_ops": ["TFLITE_BUILTINS_INT8", "TFLITE_BUILTINS"],
            "inference_input_type": "float32", "inference_output_type": "float32"}


def _convert_bytes(saved_model: Path, signature: str, flavour: str,
                   feeds: list | None, float_nodes=()) -> tuple[bytes, dict]:
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    # The calibrator runs TF's own deprecated tf.lite.Interpreter, which warns each time.
    with captured_native_output() as output, warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            converter = tf.lite.TFLiteConverter.from_saved_model(
                str(saved_model), signature_keys=[signature])
            options = _configure(tf, converter, flavour, feeds)
            flatbuffer = converter.convert()
            if flavour == "mixed_int8":
                flatbuffer = quantize_calibrated(flatbuffer, float_nodes)
                options["float_nodes"] = list(float_nodes)
            failure = None
        except TfoptError:
            raise
        except Exception as exc:  # noqa: BLE001 - the converter raises many types; all mean "cannot"
            failure = exc
    text = "".join(output) + "".join(f"{w.category.__name__}: {w.message}\n" for w in warned)
    if text:
        log.debug("LiteRT converter output (%s, %s):\n%s", saved_model, flavour, text)
    if failure is not None:
        reason = condense_converter_error(str(failure) or text)
        raise LiteRTConversionError(
            f"cannot convert {saved_model} to LiteRT {flavour}: {reason}",
            details=f"{failure}\n{text}") from failure
    return flatbuffer, options


def _converted_signature(flatbuffer: bytes, name: str, failure: str) -> SignatureInfo:
    """The signature as the runtime that will serve the model reads it."""
    from tfopt.optimizer.runtime.litert import import_interpreter, litert_signature

    try:
        interpreter = import_interpreter()(model_content=flatbuffer)
    except (ValueError, RuntimeError) as exc:
        reason = condense_converter_error(str(exc))
        raise LiteRTConversionError(f"{failure}: the converted model does not load in "
                                    f"ai-edge-litert: {reason}", details=str(exc)) from None
    return litert_signature(interpreter, name, "the converted model")


def convert_to_litert(
    saved_model: str | os.PathLike,
    dst: str | os.PathLike,
    flavour: str,
    *,
    signature: str = DEFAULT_SIGNATURE,
    representative_data: Iterable[Mapping[str, np.ndarray]] | None = None,
    calibration_samples: int = DEFAULT_CALIBRATION_SAMPLES,
    calibration_source: str | None = None,
    source_digest: str | None = None,
    overwrite: bool = False,
    policy: ScanPolicy = DEFAULT_POLICY,
    float_nodes: tuple[str, ...] = (),
) -> LiteRTModel:
    """Write ``dst`` (a ``.tflite`` path) and its sidecar ``dst + '.json'``.

    ``float_nodes`` (``mixed_int8``): the ops, by their first output's name, kept in float
    (:mod:`tfopt.optimizer.search.precision`).

    ``representative_data`` (``full_int8`` only): feed dicts ``{input key: array}``, e.g. a
    :class:`tfopt.optimizer.inputs.calibration.Calibration`'s ``feeds``; the first ``calibration_samples``
    are used. ``calibration_source`` (what they are, e.g. ``synthetic``) goes to the sidecar.
    """
    if flavour not in FLAVOURS:
        raise InvalidInputsError(f"unknown LiteRT flavour '{flavour}'; one of "
                                 f"{', '.join(FLAVOURS)}")
    dst = Path(dst)
    if dst.suffix != LITERT_SUFFIX:
        raise DestinationError(f"{dst}: a LiteRT model's file name must end in {LITERT_SUFFIX}")
    sidecar = manifest_path(dst)
    check_file_writable(dst, overwrite)
    check_file_writable(sidecar, overwrite)
    saved_model = Path(saved_model)
    contract = get_signature(saved_model, signature, policy=policy)  # typed errors, the scan
    feeds = None
    if flavour in CALIBRATING:
        if representative_data is None:
            raise InvalidInputsError(f"{flavour} needs calibration data: pass representative "
                                     "feed dicts of inputs")
        feeds = checked_feeds(contract, representative_data, calibration_samples, flavour)

    flatbuffer, options = _convert_bytes(saved_model, signature, flavour, feeds, float_nodes)
    failure = f"cannot convert {saved_model} to LiteRT {flavour}"
    converted = _converted_signature(flatbuffer, signature, failure)
    if problem := contract_difference(contract, converted):
        raise LiteRTConversionError(
            f"{failure}: the converted signature differs from the SavedModel's: {problem}")

    from tfopt.optimizer.tf_runtime import import_tensorflow

    manifest = Manifest(
        flavour=flavour, flavour_description=FLAVOURS[flavour], file=dst.name,
        sha256=hashlib.sha256(flatbuffer).hexdigest(), size_bytes=len(flatbuffer),
        signature=converted, source_path=str(saved_model), source_digest=source_digest,
        tensorflow_version=import_tensorflow().__version__, converter=options,
        calibration_samples=len(feeds) if feeds is not None else None,
        calibration_source=calibration_source if feeds is not None else None)
    with atomic_file(dst, overwrite) as staging:
        staging.write_bytes(flatbuffer)
    try:
        with atomic_file(sidecar, overwrite) as staging:
            write_manifest(manifest, staging)
    except BaseException:
        dst.unlink(missing_ok=True)  # a model without its sidecar is not a finished output
        raise
    log.info("wrote LiteRT %s model %s (%d bytes)", flavour, dst, len(flatbuffer))
    return LiteRTModel(path=dst, manifest_path=sidecar, manifest=manifest)
