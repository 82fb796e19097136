"""Convert a SavedModel signature to an OpenVINO IR (``model.xml`` + ``model.bin``), in one of
four flavours.

- ``fp32``: ``openvino.convert_model`` on the SavedModel, weights kept float32
  (``compress_to_fp16=False``), compiled with ``INFERENCE_PRECISION_HINT`` ``f32``. The hint is
  not optional: on a CPU with native bfloat16 the CPU plugin's default precision is bf16.
- ``bf16``: the same IR, compiled with the hint ``bf16``: the plugin runs convolutions and
  matrix products in bfloat16. Only on a CPU with native bfloat16 (AVX512_BF16 or AMX-BF16;
  elsewhere it would be emulated); skipped with the reason otherwise.
- ``int8``: NNCF's post-training quantization of the IR (min/max ranges, fast bias correction,
  the default performance preset) calibrated on representative inputs:
  :attr:`tfopt.optimizer.inputs.calibration.Calibration.feeds`, as LiteRT's full int8 takes them. Ops NNCF
  leaves in float run in float32 (hint ``f32``), so this flavour is int8 and nothing else.
- ``mixed_int8``: ``int8`` with the layers a precision search chose
  (:mod:`tfopt.optimizer.search.precision.openvino_runtime`) kept in float32: NNCF's
  ``IgnoredScope(names=...)``, the layers named by their OpenVINO op (friendly) names, recorded
  as the converter options' ``float_nodes``.

The precision hint is recorded in the sidecar ``model.xml.json`` (:mod:`tfopt.optimizer.model.sidecar`),
which :mod:`tfopt.optimizer.runtime.openvino` reads, so every runner of the candidate (benchmark,
evaluation, tuning, a champion) compiles it as it was measured; the IR cannot carry it itself.

The SavedModel is converted once per signature (:class:`OpenVINOExport`), whatever the number of
flavours. ``convert_model`` reads a SavedModel's ``serving_default`` signature from its
directory; another signature is converted from the loaded signature function. The IR is read
back and refused unless it presents the SavedModel signature's keys, dtypes and shapes; a model
with an op OpenVINO cannot convert is refused with the ops named.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.candidates.conversion import (
    ConversionError,
    SharedConversion,
    calibration_record,
    check_contract,
    install_files,
    prepare,
    run_converter,
    staging_directory,
)
from tfopt.optimizer.candidates.openvino import IR_SUFFIX, WEIGHTS_SUFFIX
from tfopt.optimizer.inputs.calibration import Calibration
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.model.sidecar import Sidecar, feeds_literal, sidecar_path, snippet
from tfopt.optimizer.model.signature import SignatureInfo

log = logging.getLogger(__name__)

FLAVOURS: dict[str, str] = {
    "fp32": "float32 weights and compute (INFERENCE_PRECISION_HINT f32)",
    "bf16": "float32 weights; the CPU plugin computes in bfloat16 (INFERENCE_PRECISION_HINT "
            "bf16); native bfloat16 CPUs only",
    "int8": "int8 where NNCF quantized, calibrated on representative data; float32 "
            "elsewhere (INFERENCE_PRECISION_HINT f32)",
    "mixed_int8": "int8 with the layers a precision search chose kept in float32 (NNCF "
                  "ignored_scope; the converter options' float_nodes name them)",
}
PRECISION = {"fp32": "f32", "bf16": "bf16", "int8": "f32", "mixed_int8": "f32"}
CALIBRATING = ("int8", "mixed_int8")
DEFAULT_CALIBRATION_SAMPLES = 100
_LOGGERS = ("nncf",)


@dataclass(frozen=True)
class OpenVINOModel:
    path: Path  # the .xml; its weights are the .bin beside it
    sidecar_path: Path
    sidecar: Sidecar


def bf16_unavailable_reason() -> str | None:
    """Why the CPU plugin cannot run bfloat16 natively here, or None."""
    import openvino as ov

    from tfopt.optimizer.system.cpu_features import cpu_supports_bf16

    if not cpu_supports_bf16():
        return "this CPU has no native bfloat16 (avx512_bf16 or amx_bf16): it would be emulated"
    if "BF16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        return "OpenVINO's CPU plugin does not offer BF16 on this CPU"
    return None


class OpenVINOExport(SharedConversion):
    """``convert_model``'s result for one SavedModel signature, converted once and shared by
    the flavours."""

    def __init__(self, saved_model: str | os.PathLike, signature: str = DEFAULT_SIGNATURE):
        super().__init__(saved_model, signature)

    def model(self):
        """A copy of the converted model, for a flavour to change and save."""
        return self.result().clone()

    def _convert(self):
        import openvino as ov

        from tfopt.optimizer.runtime.openvino import condense_openvino_error

        def run():
            if self.signature == DEFAULT_SIGNATURE:
                return ov.convert_model(str(self.saved_model))
            from tfopt.optimizer.tf_runtime import import_tensorflow

            # The loaded object owns the variables the function reads: keep it alive.
            loaded = import_tensorflow().saved_model.load(str(self.saved_model))
            return ov.convert_model(loaded.signatures[self.signature])

        return run_converter(run, f"cannot convert {self.saved_model} to OpenVINO",
                             f"openvino.convert_model ({self.saved_model})",
                             condense=condense_openvino_error)


def quantize_int8(model, feeds: list, float_nodes=(), what: str = "the model"):
    """``model`` quantized by NNCF (post-training, performance preset, fast bias correction)
    on ``feeds``, the ops named in ``float_nodes`` (friendly names) left in float
    (``IgnoredScope``; a name the model lacks is refused); a failure one
    :class:`ConversionError` line."""
    import nncf

    ignored = nncf.IgnoredScope(names=list(float_nodes)) if float_nodes else None
    return run_converter(
        lambda: nncf.quantize(model, nncf.Dataset(feeds), subset_size=len(feeds),
                              ignored_scope=ignored),
        f"cannot quantize {what} to OpenVINO int8", "NNCF quantize", _LOGGERS)


def _build_flavour(export: OpenVINOExport, flavour: str, xml: Path, feeds: list | None,
                   float_nodes=()) -> dict:
    """Save the flavour's IR at ``xml``; return the converter options it took."""
    import openvino as ov

    if flavour == "bf16" and (reason := bf16_unavailable_reason()):
        raise ConversionError(f"OpenVINO bf16 is not built: {reason}")
    options = {"openvino_version": ov.get_version(), "compress_to_fp16": False}
    model = export.model()
    if flavour in CALIBRATING:
        import nncf

        model = quantize_int8(model, feeds, float_nodes if flavour == "mixed_int8" else (),
                              str(export.saved_model))
        options.update({"nncf_version": nncf.__version__, "quantization": "post-training",
                        "preset": "performance", "fast_bias_correction": True})
        if flavour == "mixed_int8":
            options["float_nodes"] = list(float_nodes)
    ov.save_model(model, str(xml), compress_to_fp16=False)
    return options


def ir_sidecar(xml: Path, flavour: str, signature: SignatureInfo, options: dict,
               source_path: str, source_digest: str | None = None,
               calibration: dict | None = None) -> Sidecar:
    """The sidecar of the IR ``xml`` (its weights beside it) in ``flavour``: above all the
    precision hint its runner compiles it with."""
    precision = PRECISION[flavour]
    return Sidecar(
        format="openvino", flavour=flavour, flavour_description=FLAVOURS[flavour],
        files=(xml, xml.with_suffix(WEIGHTS_SUFFIX)), signature=signature,
        source_path=source_path, source_digest=source_digest, converter=options,
        runtime_package="openvino", runtime_options={"INFERENCE_PRECISION_HINT": precision},
        load_python=load_snippet(xml.name, signature, precision), calibration=calibration)


def load_snippet(file_name: str, signature: SignatureInfo, precision: str) -> str:
    """Python that compiles the IR for the CPU as it was measured and calls it once."""
    outputs = ", ".join(repr(k) for k in signature.output_keys)
    return snippet(
        "import openvino as ov",
        "# The precision is part of the model as measured; the threads are the CPUs this",
        "# process may run on (a container's CPU quota may be lower still).",
        f"model = ov.Core().compile_model({file_name!r}, 'CPU', {{",
        f"    'INFERENCE_PRECISION_HINT': {precision!r}, 'PERFORMANCE_HINT': 'LATENCY',",
        "    'INFERENCE_NUM_THREADS': len(os.sched_getaffinity(0))})",
        f"result = model({feeds_literal(signature)})",
        f"outputs = {{key: result[key] for key in [{outputs}]}}")


def convert_to_openvino(
    saved_model: str | os.PathLike,
    dst: str | os.PathLike,
    flavour: str,
    *,
    signature: str = DEFAULT_SIGNATURE,
    calibration: Calibration | None = None,
    calibration_samples: int = DEFAULT_CALIBRATION_SAMPLES,
    source_digest: str | None = None,
    overwrite: bool = False,
    export: OpenVINOExport | None = None,
    policy: ScanPolicy = DEFAULT_POLICY,
    float_nodes: tuple[str, ...] = (),
) -> OpenVINOModel:
    """Write ``dst`` (a ``.xml`` path), its weights (``.bin``) and its sidecar
    (``dst + '.json'``).

    ``calibration`` (``int8``, ``mixed_int8``): its first ``calibration_samples`` feeds
    calibrate. ``export``: a conversion of the same model and signature to reuse.
    ``float_nodes`` (``mixed_int8`` only): the ops, by friendly name, left in float.
    """
    request = prepare(saved_model, dst, flavour, kind="OpenVINO", flavours=tuple(FLAVOURS),
                      policy=policy,
                      calibrating=CALIBRATING, suffix=IR_SUFFIX, companions=(WEIGHTS_SUFFIX,),
                      signature=signature, calibration=calibration,
                      samples=calibration_samples, overwrite=overwrite,
                      packages=("openvino", "nncf") if flavour in CALIBRATING else ("openvino",),
                      extra="openvino")
    export = export or OpenVINOExport(request.saved_model, signature)
    export.check_source(request.saved_model, signature)

    from tfopt.optimizer.runtime.openvino import model_signature, read_ir

    dst, weights = request.files
    with staging_directory(dst) as work:
        staged = Path(work) / dst.name
        options = _build_flavour(export, flavour, staged, request.feeds, float_nodes)
        converted = model_signature(read_ir(staged), signature)
        check_contract(request.contract, converted,
                       f"cannot convert {request.saved_model} to OpenVINO {flavour}")
        sidecar = ir_sidecar(dst, flavour, converted, options, str(request.saved_model),
                             source_digest, calibration_record(request.feeds, calibration))
        # Weights first: an .xml is what a reader looks for.
        install_files([(staged.with_suffix(WEIGHTS_SUFFIX), weights), (staged, dst)], sidecar,
                      overwrite)
    log.info("wrote OpenVINO %s model %s (%d + %d bytes)", flavour, dst, dst.stat().st_size,
             weights.stat().st_size)
    return OpenVINOModel(path=dst, sidecar_path=sidecar_path(dst), sidecar=sidecar)
