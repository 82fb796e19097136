"""Convert a SavedModel signature to an ``.onnx`` file for ONNX Runtime, in one of four flavours.

- ``fp32``: tf2onnx's graph as converted. ONNX Runtime applies its graph optimizations (constant
  folding, fusions, the CPU's blocked layouts) every time a session loads it.
- ``optimized``: tf2onnx's graph simplified by tfopt's exact rewrites
  (:mod:`tfopt.optimizer.candidates.onnx.rewrites`: the shape bookkeeping tf2onnx computes from the
  unknown batch size, which ONNX Runtime cannot fold, proven away with symbolic shapes), then
  ONNX Runtime's offline optimization, saved
  (``SessionOptions.optimized_model_filepath``) at the ``extended`` level: fusions and folding
  baked into the file, so a server loads it without redoing them. The ``all`` level's layout
  rewrites are left to load time: ONNX Runtime says a model saved with them "should only be used
  in the same environment it was optimized in" (they depend on the CPU's vector width), and a
  registry version must run on any serving CPU. Without rewrites that match, its run time is
  the ``fp32`` flavour's (the same passes run, once offline instead of at each load); the
  sidecar's converter options name the rewrites that fired (``graph_simplification``).
- ``dynamic_int8``: int8 weights; activations quantized at run time from their observed range
  (``quantize_dynamic``), for matrix products, LSTMs, attention and embeddings; no data needed.
  Convolutions stay float: ONNX Runtime's ``ConvInteger`` made the flavour 4.3x (ResNet50) and
  5.4x (MobileNetV2) slower than the stock SavedModel call at batch 1 here
  (``benchmarks/runtimes.py``), and ONNX Runtime's own advice for CNNs is static quantization.
- ``static_int8``: int8 weights (per channel) and activations in QDQ form, activation ranges
  calibrated (min/max) on representative inputs: :attr:`tfopt.optimizer.inputs.calibration.Calibration.feeds`,
  as LiteRT's full int8 takes them. Inputs and outputs stay float32.

The int8 flavours start from the simplified graph too, then ONNX Runtime's quantization
pre-processing (shape inference and optimization), as its documentation asks: on the
bidirectional LSTM tagger, ``dynamic_int8`` from the simplified graph ran 1.19x as fast at
batch 1 (1 thread and default session, blocks of 10 calls interleaved, 95% interval
[1.19, 1.19]), with bit-identical outputs; the rewrites touch no arithmetic, so what the
quantizers see to quantize is the same.

tf2onnx runs once per SavedModel and signature (:class:`OnnxExport`), whatever the number of
flavours. It reads the signature by its keys: the ONNX graph's inputs and outputs are named
like the signature's, and the written model is read back by ONNX Runtime and refused unless it
presents the same keys, dtypes and shapes. Lookup tables (Keras ``StringLookup``, a vocabulary
file in ``assets/``) reach tf2onnx as its command line passes them: the contents TensorFlow
initialized while loading, which tf2onnx writes as constants of the lookup. tf2onnx keeps going past an op it cannot convert and
leaves it in the graph; such a model is refused with the ops named, not written. Exact GELU,
which Keras writes with ``Erfc`` (no ONNX op), reaches tf2onnx written with ``Erf``
(:mod:`tfopt.optimizer.transforms.rewrite_gelu_erf`), so Keras transformers convert.

Each model is written beside its sidecar ``model.onnx.json`` (:mod:`tfopt.optimizer.model.sidecar`); the
converters' output goes to this module's logger at DEBUG (:mod:`tfopt.optimizer.candidates.conversion`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from tfopt.optimizer.candidates.conversion import (
    CapturedOutput,
    ConversionError,
    SharedConversion,
    calibration_record,
    check_contract,
    install_files,
    prepare,
    run_converter,
    staging_directory,
)
from tfopt.optimizer.candidates.onnx import ONNX_SUFFIX
from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.inputs.calibration import Calibration
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.model.sidecar import Sidecar, feeds_literal, sidecar_path, snippet
from tfopt.optimizer.model.signature import SignatureInfo

T = TypeVar("T")

log = logging.getLogger(__name__)

FLAVOURS: dict[str, str] = {
    "fp32": "float32, as tf2onnx converted it; ONNX Runtime optimizes the graph at load",
    "optimized": "float32, tf2onnx's graph simplified by tfopt's exact ONNX rewrites, then "
                 "ONNX Runtime's graph optimizations (extended level) applied offline and "
                 "saved; the CPU-specific layout passes run at load",
    "dynamic_int8": "the simplified graph with int8 weights of matrix products, LSTMs, "
                    "attention and embeddings; their activations quantized per call from their "
                    "observed range (dynamic quantization); convolutions stay float32",
    "static_int8": "the simplified graph with int8 weights and activations (QDQ), activation "
                   "ranges calibrated on representative data; float32 inputs and outputs",
    "mixed_int8": "static_int8 with the layers a precision search chose kept in float32 "
                  "(nodes_to_exclude; the converter options' float_nodes name them)",
}
CALIBRATING = ("static_int8", "mixed_int8")
DEFAULT_CALIBRATION_SAMPLES = 100
# Every flavour's session loads with all optimizations; layout passes are the CPU's own.
RUNTIME_OPTIONS = {"graph_optimization_level": "ORT_ENABLE_ALL"}
_UNSUPPORTED = re.compile(r"Unsupported ops: Counter\(\{(.*)\}\)")
_TF2ONNX_LOGGERS = ("tf2onnx",)


@dataclass(frozen=True)
class OnnxModel:
    path: Path
    sidecar_path: Path
    sidecar: Sidecar


def _unsupported_ops(captured: CapturedOutput) -> str | None:
    if match := _UNSUPPORTED.search(captured.text):
        ops = ", ".join(re.findall(r"'([^']+)'", match.group(1)))
        return f"tf2onnx has no ONNX conversion for {ops}"
    return None


class OnnxExport(SharedConversion):
    """tf2onnx's conversion of one SavedModel signature, run once and shared by the flavours."""

    def __init__(self, saved_model: str | os.PathLike, signature: str = DEFAULT_SIGNATURE):
        super().__init__(saved_model, signature)
        self.converter: dict = {}
        self._pre_processed: bytes | None = None
        self._simplified: tuple[bytes, dict] | None = None

    def model_bytes(self) -> bytes:
        return self.result()

    def simplified(self) -> tuple[bytes, dict]:
        """The converted model simplified (:mod:`tfopt.optimizer.candidates.onnx.rewrites`) and what
        the simplification did, for the sidecar: run once."""
        if self._simplified is None:
            import onnx

            from tfopt.optimizer.candidates.onnx.rewrites.simplify import simplify

            done = simplify(onnx.load_model_from_string(self.model_bytes()))
            self._simplified = (done.model.SerializeToString(), {
                "rewrites": list(done.fired), "nodes_before": done.nodes_before,
                "nodes_after": done.nodes_after})
        return self._simplified

    def pre_processed_bytes(self) -> bytes:
        """The simplified model after ONNX Runtime's quantization pre-processing, which both
        int8 flavours start from: run once (on ResNet50 it is a symbolic shape inference and
        an optimization pass over a 100 MB model, tens of seconds)."""
        if self._pre_processed is None:
            import contextlib
            import tempfile

            from onnxruntime.quantization.shape_inference import quant_pre_process

            with tempfile.TemporaryDirectory(prefix="tfopt-onnx-pre-") as work:
                converted, prepared = Path(work) / "converted.onnx", Path(work) / "prepared.onnx"
                converted.write_bytes(self.simplified()[0])
                # Its shape inference writes scratch files (sym_shape_infer_temp.onnx, external
                # *.data) into the working directory when it gives up: keep them in ours.
                with contextlib.chdir(work):
                    quant_pre_process(str(converted), str(prepared))
                self._pre_processed = prepared.read_bytes()
        return self._pre_processed

    def _convert(self) -> bytes:
        import tf2onnx
        from tf2onnx import convert, tf_loader

        from tfopt.optimizer.tf_runtime import import_tensorflow

        import_tensorflow()

        def run():
            # As tf2onnx's command line does (its convert.main): the frozen graph goes to the
            # converter with the lookup tables TensorFlow initialized while loading, which
            # become the ONNX graph's constant key/value tensors. The public from_graph_def
            # takes no tables: a HashTableV2 was left in the graph, and ONNX Runtime refused it.
            graph_def, inputs, outputs, tables, renames = tf_loader.from_saved_model(
                str(self.saved_model), None, None, tag=["serve"], signatures=[self.signature],
                return_initialized_tables=True, return_tensors_to_rename=True)
            graph_def = _with_erf_gelu(graph_def, inputs, outputs)
            with import_tensorflow().device("/cpu:0"):
                return convert._convert_common(
                    graph_def, name=str(self.saved_model), continue_on_error=True,
                    input_names=inputs, output_names=outputs, tensors_to_rename=renames,
                    initialized_tables=tables)[0]

        proto = run_converter(lambda: _collecting_after(run),
                              f"cannot convert {self.saved_model} to ONNX",
                              f"tf2onnx ({self.saved_model})", _TF2ONNX_LOGGERS,
                              refused=_unsupported_ops)
        self.converter = {"tf2onnx_version": tf2onnx.__version__,
                          "opset": max(o.version for o in proto.opset_import if not o.domain)}
        return proto.SerializeToString()


def _collecting_after(convert: Callable[[], T]) -> T:
    """``convert()``, then a garbage collection: tf2onnx's passes leave copies of the graph's
    weights in reference cycles, which Python's collector, counting objects rather than bytes,
    reaches late. ResNet50's flavours after the conversion started with the 7.6 GiB it left
    held; collected, they peak at 2.0 GiB (the worker's high-water mark), with byte-identical
    models."""
    import gc

    try:
        return convert()
    finally:
        gc.collect()


def _with_erf_gelu(graph_def, inputs: list[str], outputs: list[str]):
    """``graph_def`` with exact GELU written with Erf: Keras writes it with Erfc, which ONNX
    has no op for, so tf2onnx refused every Keras transformer (:mod:`rewrite_gelu_erf
    <tfopt.optimizer.transforms.rewrite_gelu_erf>`; the same function, to float32 rounding)."""
    from tfopt.optimizer.graph.names import node_name_from_input
    from tfopt.optimizer.transforms.base import TransformContext
    from tfopt.optimizer.transforms.registry import make_transform

    names = TransformContext(tuple(node_name_from_input(i) for i in inputs),
                             tuple(node_name_from_input(o) for o in outputs))
    return make_transform("rewrite_gelu_erf")(graph_def, names)


class _Feeds:
    """ONNX Runtime's calibration reader (anything with ``get_next``) over one-row feed dicts."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]):
        self._rows: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._rows, None)


def _optimize_offline(src: Path, dst: Path) -> dict:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    return {"graph_optimization_level": "ORT_ENABLE_EXTENDED"}


def _quantize(export: OnnxExport, dst: Path, work: Path, flavour: str,
              feeds: list | None, float_nodes=()) -> dict:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    prepared = work / "prepared.onnx"
    prepared.write_bytes(export.pre_processed_bytes())
    if flavour == "dynamic_int8":
        from onnxruntime.quantization.registry import IntegerOpsRegistry

        op_types = sorted(set(IntegerOpsRegistry) - {"Conv"})
        quantize_dynamic(prepared, dst, weight_type=QuantType.QInt8,
                         op_types_to_quantize=op_types)
        return {"quantization": "dynamic", "weight_type": "QInt8", "op_types": op_types,
                "pre_processed": True}
    return quantize_static_int8(prepared, dst, feeds, float_nodes=float_nodes)


def quantize_static_int8(src: Path, dst: Path, feeds: list, *, float_nodes=(),
                         only_nodes=None, calibration_cache: Path | None = None) -> dict:
    """``src`` with int8 weights (per channel) and activations in QDQ form, calibrated (min/max)
    on ``feeds``; the nodes named in ``float_nodes`` left in float (``nodes_to_exclude``: the
    ``mixed_int8`` flavour), or only ``only_nodes`` quantized. ``calibration_cache``: a file
    of the activation ranges, written by the first call and read by the next ones (ranges do
    not depend on which nodes are quantized), so that the precision search calibrates once.
    The options taken, for the sidecar."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    # Not CalibMaxIntermediateOutputs (merge the ranges every N rows): in onnxruntime 1.32 it
    # drops each N rows' minima and maxima without merging them. MinMax keeps only those per
    # row (ReduceMin/ReduceMax outputs), not the tensors, so memory does not need it.
    quantize_static(src, dst, _Feeds(feeds) if feeds is not None else None,
                    quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                    nodes_to_exclude=list(float_nodes) or None,
                    nodes_to_quantize=list(only_nodes) if only_nodes is not None else None,
                    calibration_cache_path=calibration_cache)
    record = {"quantization": "static", "quant_format": "QDQ", "per_channel": True,
              "activation_type": "QInt8", "weight_type": "QInt8", "calibrate_method": "MinMax",
              "pre_processed": True}
    if float_nodes:
        record["float_nodes"] = list(float_nodes)
    return record


def _build_flavour(export: OnnxExport, flavour: str, work: Path,
                   feeds: list | None, float_nodes=()) -> tuple[Path, dict]:
    """The flavour's model file under ``work`` and the converter options it took."""
    import onnxruntime as ort

    converted = work / "converted.onnx"
    converted.write_bytes(export.model_bytes())
    options = {**export.converter, "onnxruntime_version": ort.__version__}
    if flavour == "fp32":
        return converted, options
    built = work / f"{flavour}.onnx"
    if flavour == "optimized":
        def build():
            simplified, record = export.simplified()
            source = work / "simplified.onnx"
            source.write_bytes(simplified)
            return {**_optimize_offline(source, built), "graph_simplification": record}
    else:
        def build():
            return {**_quantize(export, built, work, flavour, feeds, float_nodes),
                    "graph_simplification": export.simplified()[1]}
    options.update(run_converter(build, f"cannot build ONNX {flavour} from "
                                        f"{export.saved_model}",
                                 f"ONNX Runtime {flavour}", ("onnxruntime",)))
    return built, options


def load_snippet(file_name: str, signature: SignatureInfo) -> str:
    """Python that loads the model with ONNX Runtime and calls it once."""
    outputs = ", ".join(repr(k) for k in signature.output_keys)
    return snippet(
        "import onnxruntime as ort",
        "options = ort.SessionOptions()",
        "# The CPUs this process may run on (a container's CPU quota may be lower still).",
        "options.intra_op_num_threads = len(os.sched_getaffinity(0))",
        f"session = ort.InferenceSession({file_name!r}, options,",
        "                               providers=['CPUExecutionProvider'])",
        f"outputs = dict(zip([{outputs}], session.run([{outputs}], {feeds_literal(signature)})))")


def convert_to_onnx(
    saved_model: str | os.PathLike,
    dst: str | os.PathLike,
    flavour: str,
    *,
    signature: str = DEFAULT_SIGNATURE,
    calibration: Calibration | None = None,
    calibration_samples: int = DEFAULT_CALIBRATION_SAMPLES,
    source_digest: str | None = None,
    overwrite: bool = False,
    export: OnnxExport | None = None,
    policy: ScanPolicy = DEFAULT_POLICY,
    float_nodes: tuple[str, ...] = (),
) -> OnnxModel:
    """Write ``dst`` (a ``.onnx`` path) and its sidecar ``dst + '.json'``.

    ``float_nodes`` (``mixed_int8`` only): the nodes of the pre-processed graph left in float
    (:mod:`tfopt.optimizer.search.precision`).
    ``calibration`` (``static_int8`` only): its first ``calibration_samples`` feeds calibrate.
    ``export``: a tf2onnx conversion of the same model and signature to reuse.
    """
    request = prepare(saved_model, dst, flavour, kind="ONNX", flavours=tuple(FLAVOURS),
                      policy=policy,
                      calibrating=CALIBRATING, suffix=ONNX_SUFFIX, companions=(),
                      signature=signature, calibration=calibration,
                      samples=calibration_samples, overwrite=overwrite,
                      packages=("onnxruntime", "onnx", "tf2onnx"), extra="onnx")
    export = export or OnnxExport(request.saved_model, signature)
    export.check_source(request.saved_model, signature)
    failure = f"cannot convert {request.saved_model} to ONNX {flavour}"

    from tfopt.optimizer.runtime.onnx import open_session, session_signature

    dst = request.dst
    with staging_directory(dst) as work:
        built, options = _build_flavour(export, flavour, Path(work), request.feeds,
                                        float_nodes if flavour == "mixed_int8" else ())
        try:
            session = open_session(built, 1, {"graph_optimization_level": "ORT_DISABLE_ALL"})
        except TfoptError as exc:
            raise ConversionError(f"{failure}: the converted model does not load: {exc}"
                                  ) from None
        converted = session_signature(session, signature)
        check_contract(request.contract, converted, failure)
        sidecar = Sidecar(
            format="onnx", flavour=flavour, flavour_description=FLAVOURS[flavour],
            files=request.files, signature=converted, source_path=str(request.saved_model),
            source_digest=source_digest, converter=options, runtime_package="onnxruntime",
            runtime_options=dict(RUNTIME_OPTIONS),
            load_python=load_snippet(dst.name, converted),
            calibration=calibration_record(request.feeds, calibration))
        install_files([(built, dst)], sidecar, overwrite)
    log.info("wrote ONNX %s model %s (%d bytes)", flavour, dst, dst.stat().st_size)
    return OnnxModel(path=dst, sidecar_path=sidecar_path(dst), sidecar=sidecar)

