"""Run a GTT recipe through TensorFlow's own C++ Graph Transform Tool.

TF 2.21 no longer exposes GTT in its public API, but still ships the binding TF1's
``tensorflow.tools.graph_transforms.TransformGraph`` called:
``_pywrap_transform_graph.TransformGraphWithStringInputs(graph_def_bytes, inputs, outputs,
transforms) -> graph_def_bytes``, with inputs and outputs as comma-joined node names and GTT's
errors raised as ``ValueError`` (or ``RuntimeError``) carrying GTT's status message. It is a
private symbol: :func:`is_available` says whether this TensorFlow has it.

This backend is the reference the Python transforms are measured against, and the fallback for
GTT transforms this package has not ported. Recipes are parsed with
:mod:`tfopt.optimizer.optimize.gtt_syntax` first (GTT's own parser accepts some malformed strings, e.g. an unclosed ``(`` silently drops
the transform) and handed to GTT one transform at a time, so that the trace shows each step.
A GTT transform that hits a ``CHECK`` aborts the process; GTT offers no way to guard that.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tfopt.optimizer.errors import TfoptError, first_line
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.optimize.gtt_syntax import TransformSpec, format_transforms, parse_transforms
from tfopt.optimizer.transforms.base import Transform, TransformConfigError, TransformContext
from tfopt.optimizer.transforms.pipeline import TransformFailed, TransformStep, run_transforms

BINDING_MODULE = "tensorflow.python.util._pywrap_transform_graph"

# The transforms TF 2.21's binding recognizes (probed one by one; the binding cannot list its
# registry). Used only to make GTT's "not recognized" error say what would have been.
KNOWN_NATIVE_TRANSFORMS = (
    "add_default_attributes", "backport_concatv2", "backport_tensor_array_v3",
    "flatten_atrous_conv", "fold_batch_norms", "fold_constants", "fold_old_batch_norms",
    "freeze_requantization_ranges", "fuse_pad_and_conv", "fuse_resize_and_conv",
    "fuse_resize_pad_and_conv", "insert_logging", "merge_duplicate_nodes", "obfuscate_names",
    "quantize_nodes", "quantize_weights", "remove_attribute", "remove_control_dependencies",
    "remove_device", "remove_nodes", "rename_attribute", "rename_op", "round_weights",
    "set_device", "sort_by_execution_order", "sparsify_gather", "strip_unused_nodes",
)


class NativeGttUnavailable(TfoptError):
    """This TensorFlow build does not ship the Graph Transform Tool binding."""


class NativeGttError(TfoptError):
    """GTT rejected the recipe or a transform failed inside GTT."""


def _binding():
    import importlib

    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    try:
        module = importlib.import_module(BINDING_MODULE)
    except ImportError:
        module = None
    if module is None or not hasattr(module, "TransformGraphWithStringInputs"):
        raise NativeGttUnavailable(
            f"the native Graph Transform Tool is not available in this TensorFlow "
            f"({BINDING_MODULE}.TransformGraphWithStringInputs is missing); "
            f"use the python backend")
    return module


def is_available() -> bool:
    try:
        _binding()
    except NativeGttUnavailable:
        return False
    return True


def _gtt_message(exc: Exception, transforms: str) -> str:
    message = first_line(exc)
    if "not recognized" in message:
        message = f"{message.rstrip('.')}; GTT's transforms: {', '.join(KNOWN_NATIVE_TRANSFORMS)}"
    return f"native GTT failed on '{transforms}': {message}"


def transform_graph(graph_def, input_names: Sequence[str], output_names: Sequence[str],
                    transforms: str):
    """Apply a GTT recipe string to ``graph_def`` with GTT itself; returns a new GraphDef."""
    from tensorflow.core.framework import graph_pb2

    specs = parse_transforms(transforms)
    if not specs:
        raise TransformConfigError("the recipe names no transforms")
    canonical = format_transforms(specs)
    binding = _binding()
    try:
        result_bytes = binding.TransformGraphWithStringInputs(
            graph_def.SerializeToString(),
            ",".join(input_names).encode(),
            ",".join(output_names).encode(),
            canonical.encode())
    except (ValueError, RuntimeError) as exc:
        raise NativeGttError(_gtt_message(exc, canonical)) from None
    result = graph_pb2.GraphDef()
    result.ParseFromString(result_bytes)
    return result


class NativeTransform(Transform):
    """One recipe step run by GTT, so that native steps share the pipeline's checks and trace."""

    def __init__(self, spec: TransformSpec):
        self.spec = spec
        self.name = spec.name
        self.values = dict(spec.params)

    def describe(self) -> str:
        return f"native:{self.spec.to_gtt()}"

    def transform(self, graph_def, context: TransformContext):
        return transform_graph(graph_def, context.input_names, context.output_names,
                               self.spec.to_gtt())


def native_transforms(specs: Iterable[TransformSpec]) -> list[Transform]:
    specs = list(specs)
    if not specs:
        raise TransformConfigError("the recipe names no transforms")
    _binding()
    return [NativeTransform(spec) for spec in specs]


def _check_signature_nodes(before: FrozenModel, after: FrozenModel) -> None:
    names = {n.name for n in after.graph_def.node}
    lost = [name for name in before.input_node_names + before.output_node_names
            if name not in names]
    if lost:
        raise TransformFailed(f"native GTT removed or renamed signature node(s) "
                              f"{', '.join(lost)}; nothing written")


def run_native_transforms(model: FrozenModel, specs: Iterable[TransformSpec]
                          ) -> tuple[FrozenModel, list[TransformStep]]:
    """Like :func:`tfopt.optimizer.transforms.pipeline.run_transforms`, with GTT doing each step."""
    result, trace = run_transforms(model, native_transforms(specs))
    _check_signature_nodes(model, result)
    return result, trace


def run_native_recipe(model: FrozenModel, transforms: str) -> FrozenModel:
    """A GTT recipe string applied by GTT; the signature is kept and its nodes checked."""
    return run_native_transforms(model, parse_transforms(transforms))[0]
