"""The search's canonical graph hash: one digest per graph whatever its node order, so the
search (:mod:`tfopt.optimizer.search.search`) skips a graph it reached before by another path, and
the re-measurement (:mod:`tfopt.optimizer.search.remeasure`) times each distinct graph once.
"""

from __future__ import annotations

import hashlib

# Constants larger than this are hashed by their dtype, shape and size, not their bytes.
HASHED_CONSTANT_BYTES = 4096


def canonical_hash(graph_def) -> str:
    """sha256 of the graph with its nodes sorted by name, each serialized deterministically
    (attr maps sorted), plus the function library and versions.

    Independent of node order, but not of node names: two graphs that differ only in the names
    of inner nodes hash differently. Rules name new nodes deterministically from the matched
    ones, so the same rewrite reached twice gives the same names and the same hash; renaming
    invariance (a hash up to isomorphism) would find a few more duplicates at a higher cost.

    A ``Const`` larger than :data:`HASHED_CONSTANT_BYTES` (a weight) counts by its name, dtype,
    shape and size, not its bytes: hashing every weight of every candidate took a third of a
    ResNet50 search's time. The search only ever holds graphs equivalent to its input, so two
    with the same structure, names and small constants (shapes, axes, split sizes, which are
    hashed whole) compute the same function; their weights can differ only by rounding, and
    either one will do.
    """
    digest = hashlib.sha256()
    for node in sorted(graph_def.node, key=lambda n: n.name):
        data = _node_identity(node)
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    for extra in (graph_def.library, graph_def.versions):
        data = extra.SerializeToString(deterministic=True)
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _node_identity(node) -> bytes:
    if node.op != "Const" or node.ByteSize() <= HASHED_CONSTANT_BYTES:
        return node.SerializeToString(deterministic=True)
    tensor = node.attr["value"].tensor
    parts = [node.name, node.op, *node.input, node.device, str(tensor.dtype),
             tensor.tensor_shape.SerializeToString(deterministic=True).hex(),
             str(tensor.ByteSize())]
    parts += [f"{key}={node.attr[key].SerializeToString(deterministic=True).hex()}"
              for key in sorted(node.attr) if key != "value"]
    return "\0".join(parts).encode()
