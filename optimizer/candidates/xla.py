"""The XLA candidate: the frozen graph as one function TensorFlow must compile with XLA (the
part of it XLA can compile, when some ops it cannot).

:func:`xla_compiled` wraps a :class:`FrozenModel`'s graph in a ``tf.function(jit_compile=True)``
called once from a new graph of placeholders: the function carries ``_XlaMustCompile=true``, so
every runtime that executes it (eager ``tf.saved_model.load``, a TF1 ``Session``) hands it whole
to XLA, which fuses elementwise ops into the convolutions and matrix products and generates code
for this CPU. XLA compiles once per input shape, so the batch dimension stays dynamic: the first
call at each new batch size pays a compilation (seconds for ResNet50). The signature's keys,
dtypes and shapes do not change; only the tensor names behind them do.

A graph with ops XLA cannot compile (string ops: a Keras ``StringLookup``'s hashing and search
of its folded vocabulary) is cut in two (:func:`xla_partition`): the ops XLA refuses, with
every node that feeds them, stay outside in the graph TensorFlow runs as before; the rest, the
numeric part between them and the outputs (the embedding, pooling and dense layers after the
lookup), is the function XLA compiles, taking the tensors that cross the cut as its arguments.
An op "XLA refuses" is one with no ``XLA_CPU_JIT`` kernel registered, or one whose type
attributes hold strings, resources or variants. A graph XLA can compile whole is the one
function, its inputs the placeholders, as before; one with nothing left to compile once the
refused ops are out is refused, naming them.

XLA on CPU is often slower than TensorFlow's oneDNN kernels (MobileNetV2 ran 5x slower here;
ResNet50 at batch 1, benchmarks/candidates.py: 1.1x the stock SavedModel's p50, 1.6x the frozen
graph's), so this is a candidate like any other: it must win in the benchmark to be published.

:func:`write_xla_saved_model` compiles and runs the candidate once at batch 1 before writing,
so a model with an op XLA cannot compile (strings, some lookups) is refused up front with
:class:`XlaRefused` naming the op, not at serving time. So is a graph with lowered (v1) while
loops, which XLA cannot compile inside a function; :func:`tfopt.optimizer.model.freeze.freeze` keeps the
functional ``While`` of an LSTM or GRU by default, and XLA compiles that (an HLO while loop:
the bidirectional LSTM tagger of benchmarks/recurrent.py ran 2.3-2.8x faster than its stock
SavedModel). The SavedModel is written by
:func:`tfopt.optimizer.model.export.write_saved_model` (TF1-style, atomic: staged, then renamed).

Serving: ``tf.saved_model.load`` and ``tf.compat.v1.saved_model.loader.load`` + ``Session.run``
(the path TF Serving takes) both compile the function with XLA, checked in
tests/test_xla_candidate.py through XLA's dump files. TF Serving itself was not run here: its
source (model_servers/main.cc; tensorflow/serving#1858) has ``tensorflow_model_server`` disable
XLA:CPU JIT unless started with ``--xla_cpu_compilation_enabled=true`` (flagged experimental;
without it, "models utilizing this feature will return bad Status on first compilation
request"). :data:`XLA_PROVENANCE` records that flag in the artifact's ``assets.extra/tfopt.json``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path

from tfopt.optimizer.files.atomic import check_writable
from tfopt.optimizer.graph.control_flow import (
    ENTER_OPS,
    EXIT_OPS,
    LOOP_COND_OPS,
    NEXT_ITERATION_OPS,
)
from tfopt.optimizer.graph.names import node_name_from_input
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.tf_runtime import import_tensorflow
from tfopt.optimizer.transforms.base import TransformRefused

STEP = "xla_jit_compile"
MUST_COMPILE_ATTR = "_XlaMustCompile"

XLA_PROVENANCE = {
    "compiler": "XLA (tf.function jit_compile=True; compiled per input shape on first call)",
    "tensorflow_model_server_flags": ["--xla_cpu_compilation_enabled=true"],
}

# The function body's arguments: each tensor that crosses the cut is read inside under one of
# these names, which input_map feeds. A Placeholder left inside the body, even unused, makes
# the eager runtime's XLA compilation fail ("No registered 'Placeholder' OpKernel for XLA").
_ARG_PREFIX = "tfopt_xla_arg/"
_XLA_DEVICE = "XLA_CPU_JIT"
_FUNCTIONAL_OPS = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case",
                             "StatelessCase", "PartitionedCall", "StatefulPartitionedCall"})
_TRIVIAL_OPS = frozenset({"Const", "Identity", "NoOp"})

# Lowered loops: tf2xla rejects their frames inside a function ("has inputs from different
# frames"), measured on keras_lstm frozen with lower_control_flow=True.
_V1_LOOP_OPS = ENTER_OPS | EXIT_OPS | NEXT_ITERATION_OPS | LOOP_COND_OPS


class XlaRefused(TransformRefused):
    """XLA cannot compile this model; the message names the reason (often the op)."""


@functools.cache
def _register_xla_kernels() -> None:
    """TensorFlow registers XLA's kernels when it first runs an op eagerly (creating the
    devices); before that the registry lists none, and every op would look refused."""
    tf = import_tensorflow()
    tf.add(tf.constant(0.0), 0.0)


@functools.cache
def _has_xla_kernel(op: str) -> bool:
    from tensorflow.python.framework import kernels

    _register_xla_kernels()
    return any(k.device_type == _XLA_DEVICE for k in kernels.get_registered_kernels_for_op(op)
               .kernel)


def _refused_by_xla(node) -> bool:
    """Whether XLA cannot compile ``node``: no XLA kernel, or a string/resource/variant type."""
    if node.op in _FUNCTIONAL_OPS:
        return False  # compiled with its body functions, which check_compiles runs
    if not _has_xla_kernel(node.op):
        return True
    from tensorflow.core.framework import types_pb2

    uncompilable = {types_pb2.DT_STRING, types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT}
    return any(value.type in uncompilable or uncompilable & set(value.list.type)
               for value in node.attr.values())


@dataclass(frozen=True)
class XlaPartition:
    """Which nodes XLA compiles (``inside``) and which TensorFlow runs around them; ``refused``:
    the op types XLA cannot compile that decided the cut."""

    inside: frozenset[str]
    outside: frozenset[str]
    refused: tuple[str, ...]


def _ancestor_closure(nodes: dict, start: set[str]) -> set[str]:
    closed, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name in closed or name not in nodes:
            continue
        closed.add(name)
        todo.extend(node_name_from_input(i) for i in nodes[name].input)
    return closed


def xla_partition(model: FrozenModel) -> XlaPartition:
    """The cut of ``model``'s graph. Outside: every node XLA refuses (the inputs' placeholders
    among them) or that the outputs do not need, with all their ancestors, so nothing outside
    reads a tensor computed inside. Inside: the rest, plus a copy of each outside constant an
    inside node reads (XLA needs shapes and axes as compile-time constants, not arguments)."""
    nodes = {n.name: n for n in model.graph_def.node}
    needed = _ancestor_closure(nodes, set(model.output_node_names))
    refused = {name for name, n in nodes.items() if n.op != "Const" and _refused_by_xla(n)}
    outside = _ancestor_closure(nodes, refused | (set(nodes) - needed))
    inside = set(nodes) - outside
    inside |= {node_name_from_input(i) for name in inside for i in nodes[name].input
               if nodes.get(node_name_from_input(i)) is not None
               and nodes[node_name_from_input(i)].op == "Const"}
    return XlaPartition(inside=frozenset(inside), outside=frozenset(outside),
                        refused=tuple(sorted({nodes[n].op for n in refused
                                              if nodes[n].op != "Placeholder"})))


def must_compile_functions(graph_def) -> list[str]:
    """Names of the functions in ``graph_def``'s library marked ``_XlaMustCompile=true``."""
    return [f.signature.name for f in graph_def.library.function
            if MUST_COMPILE_ATTR in f.attr and f.attr[MUST_COMPILE_ATTR].b]


def _tensor_name(graph_input: str) -> str:
    return graph_input if ":" in graph_input else f"{graph_input}:0"


def _split(model: FrozenModel, partition: XlaPartition):
    """(the function's body: the inside nodes, each input from outside renamed to an argument
    that ``input_map`` feeds; the outside graph; the outside tensors the arguments take)."""
    tf = import_tensorflow()
    body, around = tf.compat.v1.GraphDef(), tf.compat.v1.GraphDef()
    body.library.CopyFrom(model.graph_def.library)
    around.library.CopyFrom(model.graph_def.library)
    body.versions.CopyFrom(model.graph_def.versions)
    around.versions.CopyFrom(model.graph_def.versions)
    crossing: dict[str, str] = {}  # outside tensor -> the argument's name in the body
    for node in model.graph_def.node:
        if node.name in partition.outside:
            around.node.add().CopyFrom(node)
        if node.name not in partition.inside:
            continue
        inner = body.node.add()
        inner.CopyFrom(node)
        del inner.input[:]
        for graph_input in node.input:
            source = node_name_from_input(graph_input)
            if source in partition.inside:
                inner.input.append(graph_input)
            elif not graph_input.startswith("^"):  # control edges from outside: ordering only
                tensor = _tensor_name(graph_input)
                arg = crossing.setdefault(tensor, f"{_ARG_PREFIX}{len(crossing)}")
                inner.input.append(arg)
    return body, around, list(crossing)


def xla_compiled(model: FrozenModel) -> FrozenModel:
    """``model`` with the part XLA compiles (:func:`xla_partition`) as one must-compile call:
    the inputs, what XLA refuses and what feeds it stay in the graph as they were.

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
    partition = xla_partition(model)
    nodes = {n.name: n for n in model.graph_def.node}
    if not any(nodes[name].op not in _TRIVIAL_OPS for name in partition.inside):
        raise XlaRefused(f"XLA candidate refused: XLA cannot compile "
                         f"{', '.join(partition.refused) or 'the inputs'}, and every output "
                         "needs them: nothing is left for XLA to compile")
    body_def, around_def, crossing = _split(model, partition)
    output_names = [s.tensor_name for s in model.signature.outputs
                    if node_name_from_input(s.tensor_name) in partition.inside]
    arg_names = [f"{_ARG_PREFIX}{i}:0" for i in range(len(crossing))]

    @tf.function(jit_compile=True, autograph=False)
    def compiled_part(*args):
        return tf.graph_util.import_graph_def(
            body_def, input_map=dict(zip(arg_names, args)), return_elements=output_names,
            name="frozen")

    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(around_def, name="")
        results = iter(compiled_part(*(graph.get_tensor_by_name(t) for t in crossing)))
        # Outputs keep their node names where they can (TF adds a suffix on a clash).
        outputs = [tf.identity(next(results), name=node_name_from_input(s.tensor_name))
                   if node_name_from_input(s.tensor_name) in partition.inside
                   else graph.get_tensor_by_name(s.tensor_name)
                   for s in model.signature.outputs]
    signature = replace(model.signature, outputs=tuple(
        s.with_tensor_name(t.name) for s, t in zip(model.signature.outputs, outputs)))
    history = (*model.history, STEP if not partition.refused
               else f"{STEP}(outside: {', '.join(partition.refused)})")
    return FrozenModel(graph_def=graph.as_graph_def(), signature=signature, source=model.source,
                       history=history)


def check_compiles(model: FrozenModel, batch_size: int = 1) -> None:
    """Run ``model`` once on generated inputs; raise :class:`XlaRefused` if XLA fails."""
    tf = import_tensorflow()
    from tfopt.optimizer.runtime import load_runner

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
    from tfopt.optimizer.system.free_memory import return_freed_memory

    check_writable(dst, overwrite)  # before the compilation, which takes a while
    candidate = xla_compiled(model)
    # Where the caller holds no other reference (a candidate worker), the float graph and the
    # trace's copies go before XLA compiles, and the compiled runner's before the write: on
    # a 24 MiB MLP the build's peak over the runtime fell from 0.68 to 0.44 GiB.
    del model
    return_freed_memory()
    check_compiles(candidate)
    return_freed_memory()
    return write_saved_model(candidate, dst, overwrite=overwrite,
                             metadata={**XLA_PROVENANCE, **(metadata or {})})
