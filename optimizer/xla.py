"""The XLA candidate: the frozen graph as one function TensorFlow must compile with XLA.

:func:`xla_compiled` wraps a :class:`FrozenModel`'s graph in a ``tf.function(jit_compile=True)``
called once from a new graph of placeholders: the function carries ``_XlaMustCompile=true``, so
every runtime that executes it (eager ``tf.saved_model.load``, a TF1 ``Session``) hands it whole
to XLA, which fuses elementwise ops into the convolutions and matrix products and generates code
for this CPU. XLA compiles once per input shape, so the batch dimension stays dynamic: the first
call at each new batch size pays a compilation (seconds for ResNet50). The signature's keys,
dtypes and shapes do not change; only the tensor names behind them do.

XLA on CPU is often slower than TensorFlow's oneDNN kernels (MobileNetV2 ran 5x slower here;
ResNet50 at batch 1, benchmarks/candidates.py: 1.1x the stock SavedModel's p50, 1.6x the frozen
graph's), so this is a candidate like any other: it must win in the benchmark to be published.

:func:`write_xla_saved_model` compiles and runs the candidate once at batch 1 before writing,
so a model with an op XLA cannot compile (strings, some lookups) is refused up front with
:class:`XlaRefused` naming the op, not at serving time. So is a graph with lowered (v1) while
loops, which XLA cannot compile inside a function; :func:`optimizer.freeze.freeze` keeps the
functional ``While`` of an LSTM or GRU by default, and XLA compiles that (an HLO while loop:
the bidirectional LSTM tagger of benchmarks/recurrent.py ran 2.3-2.8x faster than its stock
SavedModel). The SavedModel is written by
:func:`optimizer.export.write_saved_model` (TF1-style, atomic: staged, then renamed).

Serving: ``tf.saved_model.load`` and ``tf.compat.v1.saved_model.loader.load`` + ``Session.run``
(the path TF Serving takes) both compile the function with XLA, checked in
tests/test_xla_candidate.py through XLA's dump files. TF Serving itself was not run here: its
source (model_servers/main.cc; tensorflow/serving#1858) has ``tensorflow_model_server`` disable
XLA:CPU JIT unless started with ``--xla_cpu_compilation_enabled=true`` (flagged experimental;
without it, "models utilizing this feature will return bad Status on first compilation
request"). :data:`XLA_PROVENANCE` records that flag in the artifact's ``assets.extra/tfopt.json``.
"""

from __future__ import annotations

import os
from pathlib import Path

from optimizer.atomic import check_writable
from optimizer.export import write_saved_model
from optimizer.frozen import FrozenModel
from optimizer.graph.control_flow import ENTER_OPS, EXIT_OPS, LOOP_COND_OPS, NEXT_ITERATION_OPS
from optimizer.graph.names import node_name_from_input
from optimizer.inputs import make_inputs
from optimizer.signature import SignatureInfo
from optimizer.tf_runtime import import_tensorflow
from optimizer.transforms.base import TransformRefused

STEP = "xla_jit_compile"
MUST_COMPILE_ATTR = "_XlaMustCompile"

XLA_PROVENANCE = {
    "compiler": "XLA (tf.function jit_compile=True; compiled per input shape on first call)",
    "tensorflow_model_server_flags": ["--xla_cpu_compilation_enabled=true"],
}

# Renamed inputs of the function body: each placeholder of the frozen graph becomes an Identity
# of one of these, fed through input_map. A Placeholder left inside the body, even unused, makes
# the eager runtime's XLA compilation fail ("No registered 'Placeholder' OpKernel for XLA").
_ARG_PREFIX = "tfopt_xla_arg/"

# Lowered loops: tf2xla rejects their frames inside a function ("has inputs from different
# frames"), measured on keras_lstm frozen with lower_control_flow=True.
_V1_LOOP_OPS = ENTER_OPS | EXIT_OPS | NEXT_ITERATION_OPS | LOOP_COND_OPS


class XlaRefused(TransformRefused):
    """XLA cannot compile this model; the message names the reason (often the op)."""


def must_compile_functions(graph_def) -> list[str]:
    """Names of the functions in ``graph_def``'s library marked ``_XlaMustCompile=true``."""
    return [f.signature.name for f in graph_def.library.function
            if MUST_COMPILE_ATTR in f.attr and f.attr[MUST_COMPILE_ATTR].b]


def _body_graph_def(model: FrozenModel):
    """The frozen graph with each input placeholder turned into an Identity of a function arg."""
    tf = import_tensorflow()
    body = tf.compat.v1.GraphDef()
    body.CopyFrom(model.graph_def)
    input_nodes = set(model.input_node_names)
    for node in body.node:
        if node.name in input_nodes:
            if node.op != "Placeholder":
                raise XlaRefused(f"XLA candidate refused: input {node.name} is a {node.op}, "
                                 "not a Placeholder")
            dtype = node.attr["dtype"]
            node.op = "Identity"
            node.attr.clear()
            node.attr["T"].CopyFrom(dtype)
            node.input.append(_ARG_PREFIX + node.name)
    return body


def xla_compiled(model: FrozenModel) -> FrozenModel:
    """``model`` as placeholders -> one XLA must-compile call of its graph -> outputs.

    Only builds the graph; XLA compiles on the first call. See :func:`write_xla_saved_model`
    for the checked, written artifact.
    """
    tf = import_tensorflow()
    loop_nodes = [n.name for n in model.graph_def.node if n.op in _V1_LOOP_OPS]
    if loop_nodes:
        raise XlaRefused(
            f"XLA candidate refused: the graph has v1 while-loop frames ({len(loop_nodes)} "
            f"Enter/Exit/NextIteration/LoopCond nodes, e.g. {loop_nodes[0]}), which XLA cannot "
            "compile inside a function; freeze without lower_control_flow=True to keep the "
            "functional While that XLA compiles")
    strings = [s.key for s in model.signature.inputs if s.dtype == "string"]
    if strings:
        raise XlaRefused(f"XLA candidate refused: input '{strings[0]}' is a string tensor, and "
                         "XLA compiles no string op")
    for spec in model.signature.inputs:
        if not spec.tensor_name.endswith(":0"):
            raise XlaRefused(f"XLA candidate refused: input '{spec.key}' is tensor "
                             f"{spec.tensor_name}, not the first output of a placeholder")
    body_def = _body_graph_def(model)
    output_names = [s.tensor_name for s in model.signature.outputs]
    arg_names = [_ARG_PREFIX + node_name_from_input(s.tensor_name) + ":0"
                 for s in model.signature.inputs]

    @tf.function(jit_compile=True, autograph=False)
    def frozen_graph(*args):
        return tf.graph_util.import_graph_def(
            body_def, input_map=dict(zip(arg_names, args)), return_elements=output_names,
            name="frozen")

    graph = tf.Graph()
    with graph.as_default():
        placeholders = [
            tf.compat.v1.placeholder(tf.as_dtype(s.dtype), s.shape,
                                     name=node_name_from_input(s.tensor_name))
            for s in model.signature.inputs]
        results = frozen_graph(*placeholders)
        # Outputs keep their node names where they can (TF adds a suffix on a clash).
        outputs = [tf.identity(t, name=node_name_from_input(s.tensor_name))
                   for s, t in zip(model.signature.outputs, results)]
    signature = SignatureInfo(
        name=model.signature.name,
        inputs=tuple(s.with_tensor_name(p.name)
                     for s, p in zip(model.signature.inputs, placeholders)),
        outputs=tuple(s.with_tensor_name(t.name)
                      for s, t in zip(model.signature.outputs, outputs)),
        method_name=model.signature.method_name)
    return FrozenModel(graph_def=graph.as_graph_def(), signature=signature, source=model.source,
                       history=(*model.history, STEP))


def check_compiles(model: FrozenModel, batch_size: int = 1) -> None:
    """Run ``model`` once on generated inputs; raise :class:`XlaRefused` if XLA fails."""
    tf = import_tensorflow()
    from optimizer.runtime import load_runner

    runner = load_runner(model)
    try:
        runner(make_inputs(model.signature, batch_size, seed=0))
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError,
            tf.errors.InternalError) as exc:
        raise XlaRefused(f"XLA candidate refused: XLA cannot compile the model: "
                         f"{_compile_error(exc)}") from None


_NOISE = ("Graph execution error", "Detected at node", "<stack traces")


def _compile_error(exc: Exception) -> str:
    """The informative line of a TF error, past "Graph execution error:" and node traces."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if not line.startswith(_NOISE):
            return line
    return lines[0] if lines else type(exc).__name__


def write_xla_saved_model(
    model: FrozenModel,
    dst: str | os.PathLike,
    overwrite: bool = False,
    metadata: dict | None = None,
) -> Path:
    """Build the XLA candidate of ``model``, check that XLA compiles it, write it at ``dst``."""
    check_writable(dst, overwrite)  # before the compilation, which takes a while
    candidate = xla_compiled(model)
    check_compiles(candidate)
    return write_saved_model(candidate, dst, overwrite=overwrite,
                             metadata={**XLA_PROVENANCE, **(metadata or {})})
