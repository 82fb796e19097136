"""SavedModel signature -> :class:`FrozenModel`: variables become constants.

Uses TensorFlow's own ``convert_variables_to_constants_v2``, which also inlines the signature's
function calls. Functional control flow (``While``/``If`` from RNN layers and conds) stays
functional, its cond and body functions in the graph's library
(:mod:`tfopt.optimizer.graph.functional_control_flow`), marked to be lowered to a frame by the runtime
that loads the graph, as tf.function marks it: XLA compiles such a loop and
``unroll_static_loops`` can unroll it, where the lowered v1 form (Enter/Exit/Switch/Merge) is
opaque to both. ``lower_control_flow=True`` lowers it at freezing time instead, the old
behaviour; so does a model whose lookup tables are read inside a branch or loop body, since
folding reaches only the top-level graph. Nodes the signature's outputs do not need (training ops, savers, initializers) are
dropped. Lookup tables the signature only reads are folded into constants
(:mod:`tfopt.optimizer.graph.lookup_tables`), so the frozen graph has no resource input.
"""

from __future__ import annotations

import logging
import os

from tfopt.optimizer.errors import CorruptSavedModelError, UnknownSignatureError, first_line
from tfopt.optimizer.graph.captured_tables import fold_captured_tables
from tfopt.optimizer.graph.functional_control_flow import lower_at_load
from tfopt.optimizer.graph.lookup_tables import TableReadInFunction, check_no_graph_tables
from tfopt.optimizer.graph.names import node_name_from_input
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import (
    DEFAULT_SIGNATURE,
    get_signature,
    read_saved_model_proto,
    serving_meta_graph,
)
from tfopt.optimizer.tf_runtime import import_tensorflow

log = logging.getLogger(__name__)


def load_signature_function(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                            *, policy: ScanPolicy = DEFAULT_POLICY):
    """``tf.saved_model.load(path).signatures[name]``, with typed errors for bad input; the
    model is scanned under ``policy`` before TensorFlow loads it."""
    tf = import_tensorflow()
    tags = list(serving_meta_graph(read_saved_model_proto(path, policy), path).meta_info_def.tags)
    try:
        loaded = tf.saved_model.load(str(path), tags=tags or None)
    except (tf.errors.OpError, ValueError, OSError) as exc:
        raise CorruptSavedModelError(f"cannot load SavedModel {path}: {first_line(exc)}") from None
    if signature_name not in loaded.signatures:
        available = ", ".join(sorted(loaded.signatures)) or "none"
        raise UnknownSignatureError(
            f"signature '{signature_name}' not found in {path}; available: {available}")
    # Keep the loaded object alive as long as the function: it owns the variables.
    fn = loaded.signatures[signature_name]
    fn._tfopt_owner = loaded
    return fn


def freeze(
    path: str | os.PathLike,
    signature_name: str = DEFAULT_SIGNATURE,
    lower_control_flow: bool = False,
    *,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> FrozenModel:
    """The signature ``signature_name`` of the SavedModel at ``path``, frozen; the model is
    scanned under ``policy`` (:mod:`tfopt.optimizer.model.op_scan`) before TensorFlow loads it."""
    # read and scanned before TensorFlow is imported: a refused or broken model costs no runtime
    signature = get_signature(path, signature_name, policy=policy)
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    fn = load_signature_function(path, signature_name, policy=policy)
    log.info("freezing %s [%s]", path, signature_name)
    check_no_graph_tables(fn)
    frozen_fn = convert_variables_to_constants_v2(fn, lower_control_flow=lower_control_flow)
    try:
        graph_def, frozen_inputs = fold_captured_tables(fn, frozen_fn)
    except TableReadInFunction as exc:
        if lower_control_flow:
            raise
        # Folding reaches lookups in the top-level graph only; lowered, a branch's or loop
        # body's lookups are in it.
        log.info("freeze: %s; lowering control flow to fold it", first_line(exc))
        lower_control_flow = True
        frozen_fn = convert_variables_to_constants_v2(fn, lower_control_flow=True)
        graph_def, frozen_inputs = fold_captured_tables(fn, frozen_fn)

    # A signature function's flat inputs and outputs follow its keys in sorted order, which is
    # also the order SignatureInfo keeps them in.
    input_keys = sorted(fn.structured_input_signature[1])
    output_keys = sorted(fn.structured_outputs)
    if input_keys != signature.input_keys or output_keys != signature.output_keys:
        raise CorruptSavedModelError(
            f"{path}: signature '{signature_name}' in saved_model.pb does not match the loaded "
            f"function (inputs {signature.input_keys} vs {input_keys})")
    if len(frozen_inputs) != len(input_keys) or len(frozen_fn.outputs) != len(output_keys):
        raise CorruptSavedModelError(
            f"{path}: freezing '{signature_name}' left {len(frozen_inputs)} inputs for "
            f"{len(input_keys)} signature inputs")
    frozen_signature = type(signature)(
        name=signature.name,
        inputs=tuple(spec.with_tensor_name(name)
                     for spec, name in zip(signature.inputs, frozen_inputs)),
        outputs=tuple(spec.with_tensor_name(t.name)
                      for spec, t in zip(signature.outputs, frozen_fn.outputs)),
        method_name=signature.method_name,
    )
    graph_def = _keep_only_what_outputs_need(graph_def, frozen_signature)
    if not lower_control_flow:
        lower_at_load(graph_def)  # the converter turned the runtime's lowering off
    return FrozenModel(graph_def=graph_def, signature=frozen_signature, source=str(path),
                       history=("freeze",))


def _keep_only_what_outputs_need(graph_def, signature):
    from tensorflow.python.framework import graph_util

    outputs = [node_name_from_input(s.tensor_name) for s in signature.outputs]
    pruned = graph_util.extract_sub_graph(graph_def, outputs)
    # An input the outputs don't use is still part of the signature: keep its placeholder.
    kept = {n.name for n in pruned.node}
    by_name = {n.name: n for n in graph_def.node}
    for spec in signature.inputs:
        name = node_name_from_input(spec.tensor_name)
        if name not in kept:
            pruned.node.add().CopyFrom(by_name[name])
    dropped = len(graph_def.node) - len(pruned.node)
    if dropped:
        log.debug("dropped %d nodes the outputs do not need", dropped)
    return pruned
