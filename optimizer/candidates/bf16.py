"""The bfloat16 candidate: a frozen model with oneDNN's automatic mixed precision baked in.

On a CPU with native bfloat16 (AVX512_BF16 or AMX-BF16), oneDNN runs convolutions and matrix
products in bfloat16 at up to twice the float32 rate; measured on ResNet50 (random weights,
batch 1): frozen float32 21 ms, this candidate 15.7 ms. :func:`bf16_mixed_precision` runs
Grappler's ``auto_mixed_precision_onednn_bfloat16`` pass offline through the ``grappler``
transform (:mod:`tfopt.optimizer.transforms.grappler`) with :data:`BF16_PASSES`, so the artifact
itself holds the bfloat16 ops and the Casts around them. The signature does not change: inputs
and outputs stay float32, and :func:`tfopt.optimizer.model.export.write_saved_model` writes the result as a
SavedModel that ``tf.saved_model.load`` and TF Serving load as usual.

The passes leave out ``remap``: bfloat16 ``_Fused*`` nodes exist only inside a running oneDNN
session and an artifact holding them would not load; TensorFlow fuses the bfloat16 Conv2D +
BiasAdd + activation again in memory when it loads the model.

Normalizations stay float32: :data:`FLOAT32_OPS` (LayerNorm's ``SquaredDifference`` and
``Rsqrt``, ``Softmax``) are added to the pass's deny list, which paints the statistics around
them (LayerNorm's ``Mean`` and ``AddV2``) float32 too, with a Cast at each end. The matrix
products, their bias adds and activations stay bfloat16. On the BERT-style encoder of
``benchmarks/families.py`` (``benchmarks/bert_encoder.py``, docs/transformers.md) every op in
bfloat16 was 1.85x the stock call, max abs diff 3.7e-02 over 64 inputs; with the normalizations
in float32 2.29x and 1.7e-02: TensorFlow's element-wise kernels are slower in bfloat16 than in
float32 (no oneDNN kernel, converted element by element), and a mean or variance over 256
features in 8 significant bits loses most of the precision. A model without these ops (a
convnet) gets the same graph as before. TensorFlow reads the lists only from environment
variables (``TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD`` and the ``..._REMOVE`` of the
other lists, since an op in two lists fails the pass), so :func:`bf16_mixed_precision` sets them
around its Grappler run and restores them after.

Loops: on a graph with functional control flow (a Keras RNN's ``While``) the bfloat16 pass
retypes the TensorLists the main graph creates but not the body that writes them (measured on a
bidirectional LSTM: "op elements float but list elements bfloat16" at the first call), so such a
graph is lowered to v1 frames first, by Grappler's ``function`` pass in the same run.

Numerics: bfloat16 keeps 8 significant bits (about 3 decimal digits), so outputs move by up to
a few percent of their scale. This candidate is judged by held-out accuracy, not by the
float-rewrite equivalence bound; tests/test_bf16_candidate.py states the tolerances measured.

Refusal: on a CPU without native bfloat16 (it would be emulated, slower than float32), with
oneDNN off, or when the model has nothing the pass converts, :func:`bf16_mixed_precision` raises
:class:`Bf16Refused` (a ``TransformRefused``, exit code 2) with the reason. An exception rather
than ``None``: a caller building several candidates catches it and lists this one as skipped
with the message, and one that does not cannot mistake "no candidate" for a model.

Serving: the SavedModel runs wherever TensorFlow runs, but on a CPU without native bfloat16 it
is emulated and slower than the float32 model; :data:`BF16_PROVENANCE`, passed as
``write_saved_model(..., metadata=BF16_PROVENANCE)``, records that requirement next to it.
"""

from __future__ import annotations

import contextlib
import os

from tfopt.optimizer.graph.functional_control_flow import functional_nodes
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.transforms.base import TransformRefused
from tfopt.optimizer.transforms.grappler import (
    BF16_OPTIMIZER,
    DEFAULT_OPTIMIZERS,
    bf16_unavailable_reason,
)

STEP = "bf16_mixed_precision"


def _bf16_passes() -> tuple[str, ...]:
    # Grappler's default float32 passes minus remap, with the bfloat16 pass right after
    # constant folding (Grappler's own order), so folded constants are cast once, offline.
    passes = [p for p in DEFAULT_OPTIMIZERS if p != "remap"]
    passes.insert(passes.index("constfold") + 1, BF16_OPTIMIZER)
    return tuple(passes)


BF16_PASSES = _bf16_passes()

# Kept float32 (see the module docstring): normalizations, whose statistics bfloat16 rounds
# away and whose element-wise kernels are slower in bfloat16.
FLOAT32_OPS = ("SquaredDifference", "Rsqrt", "Softmax")
_LIST_VARIABLE = "TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_{}"
# The deny list gains them; every other list loses them (an op in two lists fails the pass).
_LIST_EDITS = {"DENYLIST_ADD": FLOAT32_OPS, "ALLOWLIST_REMOVE": FLOAT32_OPS,
               "INFERLIST_REMOVE": FLOAT32_OPS, "CLEARLIST_REMOVE": FLOAT32_OPS}

BF16_PROVENANCE = {
    "precision": "bfloat16 mixed precision (oneDNN auto_mixed_precision)",
    "serving_cpu_needs": "avx512_bf16 or amx_bf16; elsewhere bfloat16 is emulated and slower",
}

_BFLOAT16 = 14  # DataType enum (types.proto)


class Bf16Refused(TransformRefused):
    """The bfloat16 candidate cannot be made or would not help here; the message says why."""


def bfloat16_nodes(graph_def) -> list[str]:
    """Names of the nodes that compute in bfloat16 (type attribute ``T``); Casts not counted."""
    return [n.name for n in graph_def.node
            if "T" in n.attr and n.attr["T"].type == _BFLOAT16]


@contextlib.contextmanager
def float32_ops_kept():
    """The mixed-precision pass's lists edited to keep :data:`FLOAT32_OPS` in float32, through
    the environment variables TensorFlow reads them from; restored on exit."""
    saved = {}
    for edit, ops in _LIST_EDITS.items():
        name = _LIST_VARIABLE.format(edit)
        saved[name] = os.environ.get(name)
        os.environ[name] = ",".join(filter(None, [saved[name], *ops]))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def pack_bfloat16_constants(graph_def) -> int:
    """Rewrite, in place, every bfloat16 constant Grappler wrote as ``half_val`` (one int32
    per value) as ``tensor_content`` (2 bytes per value); the number rewritten.

    Grappler's constant folding writes the bfloat16 weights it casts as ``half_val``: on disk
    a varint of ~2.4 bytes per value, but 4 bytes in every in-memory copy of the graph a load
    makes (the SavedModel proto, the imported graph, the function's definition), so loading
    the bf16 candidate of a 24 MiB MLP held more than the float32 model (0.33 GiB over
    TensorFlow's import where float32 took 0.22, benchmarks/load_memory.py). The values are
    the same bits. A constant whose ``half_val`` is shorter than its shape (one value
    broadcast) is left as it is."""
    import numpy as np

    packed = 0
    for node in graph_def.node:
        tensor = node.attr["value"].tensor if node.op == "Const" else None
        if tensor is None or tensor.dtype != _BFLOAT16 or len(tensor.half_val) < 2:
            continue
        count = int(np.prod([d.size for d in tensor.tensor_shape.dim]))
        if count != len(tensor.half_val):
            continue
        tensor.tensor_content = np.asarray(tensor.half_val, dtype="<u2").tobytes()
        tensor.ClearField("half_val")
        packed += 1
    return packed


def bf16_mixed_precision(model: FrozenModel) -> FrozenModel:
    """``model`` with its float32 compute rewritten to bfloat16 where oneDNN supports it.

    Raises :class:`Bf16Refused` when this CPU or TensorFlow build cannot run bfloat16 natively,
    or when nothing in the graph was converted.
    """
    from tfopt.optimizer.transforms.pipeline import run_transforms
    from tfopt.optimizer.transforms.registry import make_transform

    reason = bf16_unavailable_reason()
    if reason:
        raise Bf16Refused(f"bfloat16 candidate refused: {reason}")
    # Grappler runs the passes in the order named: the function pass lowers the loops first.
    passes = (("function",) if functional_nodes(model.graph_def) else ()) + BF16_PASSES
    try:
        with float32_ops_kept():
            result, _ = run_transforms(model, [make_transform("grappler", optimizers=passes)])
    except TransformRefused as exc:
        raise Bf16Refused(f"bfloat16 candidate refused: {exc}") from None
    if not bfloat16_nodes(result.graph_def):
        raise Bf16Refused(
            "bfloat16 candidate refused: Grappler converted no op to bfloat16 (the model has "
            "no convolution or matrix product it can run in bfloat16), so it would equal the "
            "float32 model")
    pack_bfloat16_constants(result.graph_def)
    return FrozenModel(graph_def=result.graph_def, signature=model.signature,
                       source=model.source, history=(*model.history, STEP))
