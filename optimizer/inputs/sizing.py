"""How much memory generated inputs take, known from the signature before any is made.

A signature may declare ``[1, 50000, 50000]`` float32 (10 GB) and a config may ask for batch
400000000: both are sized here against the memory budget
(:mod:`tfopt.optimizer.system.memory_budget`) and refused with the estimate, exit 7, before a byte
is drawn, rather than left to the OOM killer midway.

The estimate is what :func:`tfopt.optimizer.inputs.generated.make_inputs` holds at its peak: the
arrays it returns plus the temporaries it makes them through (integers are drawn as int64 and
cast; tokens are drawn through several index and object arrays). The model's own working
memory comes on top, so the estimate is a floor: inputs over the budget can never fit.
"""

from __future__ import annotations

from collections.abc import Iterable

from tfopt.optimizer.errors import shown
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.system.memory_budget import MemoryBudget

DEFAULT_UNKNOWN_DIM = 8
# Bytes per element made on the way, besides the result's own: int64 draws cast to the dtype
# (integers, booleans), float32 draws cast to float16; for tokens (object arrays), the index,
# choice and pick arrays of tfopt.optimizer.inputs.generated.draw_tokens, 8 bytes each.
_INT_DRAW_BYTES = 8
_TOKEN_BYTES = 6 * 8


def feed_shape(spec: TensorSpecInfo, batch_size: int,
               unknown_dim: int = DEFAULT_UNKNOWN_DIM) -> tuple[int, ...]:
    """The shape an input is generated at: the first unknown dimension is the batch, other
    unknown ones ``unknown_dim``. ``spec`` must have a known rank."""
    return tuple((batch_size if i == 0 else unknown_dim) if d is None else d
                 for i, d in enumerate(spec.shape))


def _bytes_per_element(spec: TensorSpecInfo) -> int:
    if spec.dtype == "string":
        return _TOKEN_BYTES
    itemsize = spec.numpy_dtype.itemsize
    if spec.dtype in ("float32", "float64", "bfloat16"):
        return itemsize  # drawn in its own dtype (bfloat16 is fed as float32)
    if spec.dtype == "float16":
        return itemsize + 4
    return itemsize + _INT_DRAW_BYTES


def _spec_bytes(spec: TensorSpecInfo, batch_size: int, unknown_dim: int) -> int:
    if spec.shape is None:  # cannot be generated: make_inputs refuses it
        return 0
    elements = 1
    for d in feed_shape(spec, batch_size, unknown_dim):
        elements *= d  # Python ints: a hostile shape cannot overflow the estimate
    return elements * _bytes_per_element(spec)


def generated_bytes(signature: SignatureInfo, batch_size: int,
                    unknown_dim: int = DEFAULT_UNKNOWN_DIM) -> int:
    """The estimated peak bytes of one batch of generated inputs."""
    return sum(_spec_bytes(spec, batch_size, unknown_dim) for spec in signature.inputs)


def require_generated_inputs_fit(signature: SignatureInfo, batch_sizes: Iterable[int],
                                 budget: MemoryBudget, what: str = "generated inputs",
                                 unknown_dim: int = DEFAULT_UNKNOWN_DIM) -> None:
    """Refuse (:class:`~tfopt.optimizer.system.memory_budget.MemoryBudgetError`, exit 7) inputs
    that would not fit ``budget`` at the largest of ``batch_sizes``, naming the largest
    input and the estimate."""
    batch = max(batch_sizes)
    estimate = generated_bytes(signature, batch, unknown_dim)
    if estimate > budget.bytes:
        spec = max(signature.inputs, key=lambda s: _spec_bytes(s, batch, unknown_dim))
        shape = ", ".join(map(str, feed_shape(spec, batch, unknown_dim)))
        budget.require(estimate, f"{what} at batch {batch} (the largest: '{shown(spec.key)}' "
                                 f"[{shape}] {spec.dtype})")
