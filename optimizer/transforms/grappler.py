"""grappler: run TensorFlow's Grappler on the frozen graph offline, baking its rewrites in.

TensorFlow runs Grappler every time it loads a graph; running it here instead stores the result
(constant folding, arithmetic simplification, and the remapper's fusions such as Conv2D + BiasAdd
+ Relu -> ``_FusedConv2D`` and MatMul + BiasAdd -> ``_FusedMatMul``) in the artifact, where the
transforms after it and the benchmark see it. The fused ops are CPU kernels registered in TF, so
the graph runs as is when reloaded.

How: the GraphDef goes into a MetaGraphDef whose ``train_op`` collection lists the inputs, the
outputs and the protected nodes (Grappler's fetch nodes, which it keeps with their names), as
TF's convert_to_constants.py and lite/python/util.py do, and through
``tf_optimizer.OptimizeGraph`` with ``rewrite_options.optimizers`` set to exactly the passes
named and ``meta_optimizer_iterations`` 2 by default (the remapper only sees the Conv2D +
BiasAdd pattern after constant folding has merged a batch norm into the convolution, which takes
the second iteration). The remapper fuses only nodes placed on a CPU, so nodes without a device
are placed on ``/device:CPU:0`` for the run and given their empty device back afterwards.

``optimizers`` uses Grappler's own names (RewriterConfig.optimizers); ``remapper``,
``model_pruner`` and ``auto_mixed_precision_mkl`` are accepted as aliases of ``remap``,
``pruning`` and ``auto_mixed_precision_onednn_bfloat16``. Grappler silently ignores a name it
does not know, so an unknown name is a config error here. ``auto_mixed_precision_onednn_bfloat16``
rewrites float32 ops to bfloat16 through oneDNN: it changes numerics (about 3 significant
digits) and is refused unless the CPU has native bfloat16 (AVX512_BF16 or AMX-BF16) and TF runs
with oneDNN, since emulated bfloat16 is slower than float32. Combined with ``remap`` (or run on
an already fused graph) it makes bfloat16 ``_FusedConv2D`` nodes, which only oneDNN's in-session
rewrite accepts: every result is imported into a fresh graph before it is returned, and one
that does not load is refused with the reason.
"""

from __future__ import annotations

from tfopt.optimizer.errors import first_line
from tfopt.optimizer.graph.validate import InvalidGraphError
from tfopt.optimizer.system.cpu_features import cpu_supports_bf16
from tfopt.optimizer.transforms.base import (
    Param,
    Transform,
    TransformConfigError,
    TransformContext,
    TransformRefused,
)

BF16_OPTIMIZER = "auto_mixed_precision_onednn_bfloat16"

# Grappler's names for its passes (meta_optimizer.cc, MakeNewOptimizer).
OPTIMIZERS = frozenset({
    "pruning", "function", "constfold", "shape", "remap", "layout", "arithmetic", "dependency",
    "common_subgraph_elimination", "loop", "memory", "debug_stripper", BF16_OPTIMIZER,
})
ALIASES = {
    "remapper": "remap",
    "model_pruner": "pruning",
    "auto_mixed_precision_mkl": BF16_OPTIMIZER,
}
# What an inference graph gains from without changing numerics beyond float reassociation.
DEFAULT_OPTIMIZERS = ("pruning", "constfold", "arithmetic", "dependency",
                      "common_subgraph_elimination", "remap")

PLACEMENT_DEVICE = "/device:CPU:0"


def grappler_name(name: str) -> str:
    """The name Grappler knows a pass by; raises TransformConfigError for an unknown one."""
    canonical = ALIASES.get(name, name)
    if canonical not in OPTIMIZERS:
        valid = ", ".join(sorted(OPTIMIZERS | set(ALIASES)))
        raise TransformConfigError(f"grappler: unknown optimizer '{name}'; valid: {valid}")
    return canonical


def onednn_enabled() -> bool:
    """True when this TensorFlow runs oneDNN kernels, which Grappler's bfloat16 pass needs."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def import_error(graph_def) -> str | None:
    """Why ``graph_def`` cannot be imported into a graph (first line), or None if it can.

    Grappler rewrites for the session it runs in: some results (bfloat16 ``_FusedConv2D``) are
    valid inside oneDNN's runtime but break the public op definitions, so an artifact holding
    them would not load.
    """
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    try:
        with tf.Graph().as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
    except (ValueError, tf.errors.OpError) as exc:
        return first_line(exc)
    return None


def bf16_unavailable_reason() -> str | None:
    """Why this machine cannot run the bfloat16 pass usefully, or None when it can."""
    if not cpu_supports_bf16():
        return (f"{BF16_OPTIMIZER} needs a CPU with native bfloat16 (avx512_bf16 or amx_bf16 "
                "in /proc/cpuinfo); this one has neither, so bfloat16 would be emulated and "
                "slower than float32")
    if not onednn_enabled():
        return (f"{BF16_OPTIMIZER} needs TensorFlow's oneDNN kernels, which are off here "
                "(TF_ENABLE_ONEDNN_OPTS=0 or a build without them)")
    return None


class Grappler(Transform):
    name = "grappler"
    rewrites_function_bodies = True  # Grappler optimizes the library's functions too
    params = (
        Param("optimizers", str, DEFAULT_OPTIMIZERS,
              "Grappler pass to run, in order, e.g. remap", repeated=True),
        Param("iterations", int, 2,
              "meta-optimizer iterations over the passes: 1 or 2 (with 1, a second run of "
              "this transform may still find work)"),
    )

    def __init__(self, **values):
        super().__init__(**values)
        self.grappler_names = list(dict.fromkeys(grappler_name(n) for n in self["optimizers"]))
        if not self.grappler_names:
            raise TransformConfigError("grappler: name at least one optimizer")
        if self["iterations"] not in (1, 2):
            raise TransformConfigError(
                f"grappler: iterations must be 1 or 2, got {self['iterations']}")

    def transform(self, graph_def, context: TransformContext):
        from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
        from tensorflow.python.grappler import tf_optimizer

        if BF16_OPTIMIZER in self.grappler_names:
            self._check_bf16()
        original_devices = {n.name: n.device for n in graph_def.node}
        meta_graph = meta_graph_pb2.MetaGraphDef()
        meta_graph.graph_def.CopyFrom(graph_def)
        for node in meta_graph.graph_def.node:
            if not node.device:
                node.device = PLACEMENT_DEVICE
        keep = list(dict.fromkeys([*context.input_names, *context.output_names,
                                   *sorted(context.protected_names)]))
        meta_graph.collection_def["train_op"].node_list.value.extend(keep)

        config = config_pb2.ConfigProto()
        rewrite = config.graph_options.rewrite_options
        rewrite.optimizers.extend(self.grappler_names)
        rewrite.meta_optimizer_iterations = self["iterations"]
        rewrite.min_graph_nodes = -1  # also optimize tiny graphs
        optimized = tf_optimizer.OptimizeGraph(config, meta_graph, verbose=False)

        for node in optimized.node:
            node.device = original_devices.get(node.name, "")
        missing = sorted(context.boundary - {n.name for n in optimized.node})
        if missing:
            raise InvalidGraphError(
                f"grappler dropped boundary node(s) {', '.join(missing)} it was told to keep")
        problem = import_error(optimized)
        if problem:
            hint = ""
            if BF16_OPTIMIZER in self.grappler_names or "bfloat16" in problem:
                hint = ("; bfloat16 _Fused* ops exist only inside a running oneDNN session, so "
                        f"run {BF16_OPTIMIZER} without remap, on an unfused graph (TensorFlow "
                        "fuses again in memory when it loads the model)")
            raise TransformRefused(
                f"grappler refused: its result cannot be loaded back: {problem}{hint}")
        return optimized

    def _check_bf16(self) -> None:
        reason = bf16_unavailable_reason()
        if reason:
            raise TransformRefused(f"grappler refused: {reason}")
