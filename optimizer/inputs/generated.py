"""Inputs made from a signature's specs, for equivalence checks and benchmarks.

Floats are standard normal. Integer inputs that feed an embedding lookup get ids in the
table's range (found in the frozen graph), since out-of-range ids make Gather fail on CPU;
other integers are drawn from ``[0, default_int_high)``.

Strings, and integers that are the keys of a lookup table, are tokens: with the input's
vocabulary (the keys of the tables it feeds, :mod:`tfopt.optimizer.inputs.vocabulary`) three in four are drawn
from it and the rest are out of it (the empty string among them), so that a check covers both
the table's hits and its default; without one, every string is a made-up token.
"""

from __future__ import annotations

import collections
import itertools

import numpy as np

from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.graph.consts import const_shape, resolve_through_identity
from tfopt.optimizer.graph.names import node_name_from_input
from tfopt.optimizer.inputs.sizing import (
    DEFAULT_UNKNOWN_DIM,
    feed_shape,
    require_generated_inputs_fit,
)
from tfopt.optimizer.model.signature import SignatureInfo
from tfopt.optimizer.system.memory_budget import MemoryBudget

GATHER_OPS = frozenset({"GatherV2", "Gather", "ResourceGather", "GatherNd"})
DEFAULT_INT_HIGH = 2
OUT_OF_VOCABULARY_SHARE = 0.25


def infer_int_ranges(graph_def, signature: SignatureInfo) -> dict[str, tuple[int, int]]:
    """For integer inputs that index an embedding table: ``key -> (0, rows)``."""
    nodes = {n.name: n for n in graph_def.node}
    consumers = collections.defaultdict(list)
    for node in graph_def.node:
        for position, inp in enumerate(node.input):
            if not inp.startswith("^"):
                consumers[node_name_from_input(inp)].append((node, position))
    ranges = {}
    for spec in signature.inputs:
        if not spec.dtype.startswith(("int", "uint")):
            continue
        rows = []
        frontier, seen = [node_name_from_input(spec.tensor_name)], set()
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            for consumer, position in consumers[name]:
                if consumer.op in GATHER_OPS and position == 1:
                    shape = const_shape(resolve_through_identity(nodes, consumer.input[0]))
                    if shape:
                        rows.append(shape[0])
                    continue
                frontier.append(consumer.name)
        if rows:
            ranges[spec.key] = (0, min(rows))
    return ranges


def make_inputs(
    signature: SignatureInfo,
    batch_size: int = 1,
    seed: int = 0,
    int_ranges: dict[str, tuple[int, int]] | None = None,
    unknown_dim: int = DEFAULT_UNKNOWN_DIM,
    vocabularies: dict[str, np.ndarray] | None = None,
    budget: MemoryBudget | None = None,
) -> dict[str, np.ndarray]:
    """One batch of inputs; the first unknown dimension is the batch, others ``unknown_dim``.
    ``vocabularies``: input key -> the tokens it expects (strings, or integer table keys).
    Inputs estimated not to fit ``budget`` (default: this process's,
    :func:`~tfopt.optimizer.system.memory_budget.memory_budget`) are refused before they are made
    (:mod:`tfopt.optimizer.inputs.sizing`)."""
    from tfopt.optimizer.system.memory_budget import memory_budget

    # sized before a byte is drawn: a declared [1, 50000, 50000] is refused here, exit 7
    require_generated_inputs_fit(signature, [batch_size], budget or memory_budget(),
                                 unknown_dim=unknown_dim)
    rng = np.random.default_rng(seed)
    int_ranges = int_ranges or {}
    vocabularies = vocabularies or {}
    feeds = {}
    for spec in signature.inputs:
        if spec.shape is None:
            raise InvalidInputsError(
                f"input '{spec.key}' has unknown rank; supply data for it instead")
        shape = feed_shape(spec, batch_size, unknown_dim)
        vocabulary = vocabularies.get(spec.key)
        if spec.dtype in ("float32", "float64", "bfloat16"):
            # drawn in its own dtype: no float64 copy of a float32 input on the way
            feeds[spec.key] = rng.standard_normal(shape, dtype=spec.numpy_dtype)
        elif spec.dtype == "float16":
            feeds[spec.key] = rng.standard_normal(shape, dtype=np.float32).astype(np.float16)
        elif spec.dtype == "string" or (vocabulary is not None and len(vocabulary)
                                        and spec.dtype.startswith(("int", "uint"))):
            feeds[spec.key] = draw_tokens(rng, shape, vocabulary).astype(spec.numpy_dtype)
        elif spec.dtype.startswith(("int", "uint")):
            low, high = int_ranges.get(spec.key, (0, DEFAULT_INT_HIGH))
            feeds[spec.key] = rng.integers(low, high, size=shape).astype(spec.numpy_dtype)
        elif spec.dtype == "bool":
            feeds[spec.key] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise InvalidInputsError(
                f"cannot generate inputs of dtype {spec.dtype} for '{spec.key}'; supply data")
    return feeds


def out_of_vocabulary(vocabulary: np.ndarray | None, count: int) -> np.ndarray:
    """``count`` distinct tokens that are not in ``vocabulary``, of its kind: the empty string
    and ``tfopt-oov-<n>`` for strings, integers past the largest key for integer keys."""
    if vocabulary is not None and len(vocabulary) and vocabulary.dtype.kind in "iu":
        return np.asarray(vocabulary).max() + 1 + np.arange(count, dtype=vocabulary.dtype)
    known = set(vocabulary.tolist()) if vocabulary is not None else set()
    made_up = itertools.chain([b""], (f"tfopt-oov-{n}".encode() for n in itertools.count()))
    fresh = (token for token in made_up if token not in known)
    return np.asarray(list(itertools.islice(fresh, count)), dtype=object)


def draw_tokens(rng: np.random.Generator, shape: tuple[int, ...],
                vocabulary: np.ndarray | None) -> np.ndarray:
    """Tokens of ``shape``: a share :data:`OUT_OF_VOCABULARY_SHARE` out of ``vocabulary`` (all
    of them without one), the rest drawn from it."""
    size = int(np.prod(shape))
    unknown = out_of_vocabulary(vocabulary, 8)[rng.integers(0, 8, size)]
    if vocabulary is None or not len(vocabulary):
        return unknown.reshape(shape)
    known = np.asarray(vocabulary)[rng.integers(0, len(vocabulary), size)]
    take_known = rng.random(size) >= OUT_OF_VOCABULARY_SHARE
    if known.dtype.kind not in "iu":
        known = known.astype(object)
    return np.where(take_known, known, unknown).reshape(shape)
