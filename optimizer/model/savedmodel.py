"""Read a SavedModel directory without executing it: validate, list signatures, describe.

Parsing ``saved_model.pb`` with protobuf alone (no TensorFlow load) is what lets bad input fail
fast with a clear message, before any graph is built or run.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.errors import (
    CorruptSavedModelError,
    NotASavedModelError,
    SourceNotFoundError,
    UnknownSignatureError,
)
from tfopt.optimizer.files.bounded_parse import parse_file
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy, check_saved_model
from tfopt.optimizer.model.signature import SignatureInfo
from tfopt.optimizer.records import JsonRecord

DEFAULT_SIGNATURE = "serving_default"
SERVE_TAG = "serve"
_INTERNAL_SIGNATURES = ("__saved_model_init_op", "__saved_model_train_op")


def read_saved_model_proto(path: str | os.PathLike, policy: ScanPolicy = DEFAULT_POLICY):
    """Parse ``saved_model.pb`` (or ``.pbtxt``) under ``path`` and scan it; typed errors.

    Every reader of a model comes through here before TensorFlow touches it, so the bounded
    parse (:mod:`tfopt.optimizer.files.bounded_parse`) and the op scan (:mod:`tfopt.optimizer.model.op_scan`),
    both under ``policy``, guard every entry point: inspect, freeze, optimize, benchmark, the
    pipeline's pull and every load after it.
    """
    from tfopt.optimizer.model.tf_protos import saved_model_class

    root = Path(path)
    if not root.exists():
        raise SourceNotFoundError(f"no such SavedModel directory: {root}")
    if not root.is_dir():
        raise NotASavedModelError(f"{root} is a file, not a SavedModel directory")
    pb, pbtxt = root / "saved_model.pb", root / "saved_model.pbtxt"
    # without TensorFlow until it is imported: the step's process reading a signature does not
    # start a 0.65 GiB runtime beside its workers (:mod:`tfopt.optimizer.model.tf_protos`)
    proto = saved_model_class()()
    if pb.is_file():
        file, text = pb, False
    elif pbtxt.is_file():
        file, text = pbtxt, True
    else:
        raise NotASavedModelError(
            f"{root} is not a SavedModel: it has no saved_model.pb or saved_model.pbtxt")
    parse_file(file, proto, text=text, label=f"{file.name} in {root}",
               max_bytes=policy.max_pb_bytes, max_memory_bytes=policy.max_parse_memory_bytes)
    if not proto.meta_graphs:
        raise CorruptSavedModelError(f"corrupt {file.name} in {root}: it holds no MetaGraph")
    check_saved_model(proto, str(root), policy, root=root)
    return proto


def serving_meta_graph(proto, path: str | os.PathLike = ""):
    """The MetaGraph tagged ``serve``; the only one when there is a single untagged MetaGraph."""
    for mg in proto.meta_graphs:
        if SERVE_TAG in mg.meta_info_def.tags:
            return mg
    if len(proto.meta_graphs) == 1:
        return proto.meta_graphs[0]
    tags = [list(mg.meta_info_def.tags) for mg in proto.meta_graphs]
    raise NotASavedModelError(f"{path}: no MetaGraph tagged 'serve' (tags found: {tags})")


def list_signatures(path: str | os.PathLike, *, policy: ScanPolicy = DEFAULT_POLICY
                    ) -> dict[str, SignatureInfo]:
    mg = serving_meta_graph(read_saved_model_proto(path, policy), path)
    return {
        name: SignatureInfo.from_signature_def(name, sig)
        for name, sig in sorted(mg.signature_def.items())
        if name not in _INTERNAL_SIGNATURES
    }


def get_signature(path: str | os.PathLike, name: str = DEFAULT_SIGNATURE, *,
                  policy: ScanPolicy = DEFAULT_POLICY) -> SignatureInfo:
    signatures = list_signatures(path, policy=policy)
    if name not in signatures:
        available = ", ".join(signatures) or "none"
        raise UnknownSignatureError(
            f"signature '{name}' not found in {path}; available: {available}")
    return signatures[name]


def directory_size(path: str | os.PathLike) -> int:
    """Bytes on disk under ``path`` (a file's own size when ``path`` is a file)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def op_histogram(graph_def, include_functions: bool = True) -> collections.Counter:
    """Op type -> count over the graph and, by default, its function library."""
    counts = collections.Counter(n.op for n in graph_def.node)
    if include_functions:
        for fn in graph_def.library.function:
            counts.update(n.op for n in fn.node_def)
    return counts


@dataclass(frozen=True)
class SavedModelDescription(JsonRecord):
    path: str
    tags: tuple[str, ...]
    signatures: dict[str, SignatureInfo]
    op_counts: dict[str, int]
    size_bytes: int
    variable_count: int
    tf_version: str


def _count_variables(meta_graph) -> int:
    from tensorflow.core.protobuf import saved_object_graph_pb2  # noqa: F401 (proto registration)

    objects = meta_graph.object_graph_def.nodes
    if objects:
        return sum(1 for obj in objects if obj.WhichOneof("kind") == "variable")
    # TF1 SavedModels keep variables as graph nodes.
    return sum(1 for n in meta_graph.graph_def.node
               if n.op in ("VariableV2", "VarHandleOp", "Variable"))


def describe(path: str | os.PathLike, *, policy: ScanPolicy = DEFAULT_POLICY
             ) -> SavedModelDescription:
    proto = read_saved_model_proto(path, policy)
    mg = serving_meta_graph(proto, path)
    counts = op_histogram(mg.graph_def)
    return SavedModelDescription(
        path=str(path),
        tags=tuple(mg.meta_info_def.tags),
        signatures=list_signatures(path, policy=policy),
        op_counts=dict(counts.most_common()),
        size_bytes=directory_size(path),
        variable_count=_count_variables(mg),
        tf_version=mg.meta_info_def.tensorflow_version,
    )
