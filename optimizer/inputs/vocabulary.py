"""The tokens a model's inputs expect: the keys of the lookup tables each input feeds.

Inputs generated for the equivalence check and the benchmark (:func:`optimizer.inputs.generated.
make_inputs`) must hit a table as well as miss it: random strings would only ever test the
out-of-vocabulary path. The keys come from the frozen graph, where every table the signature
reads is folded into a sorted constant (:mod:`optimizer.graph.lookup_tables`); an input's
vocabulary is the keys of every folded table of its kind (strings for a string input, integers
for an integer one) that it reaches.

For a model on disk (the benchmark's), the serving graph of a SavedModel tfopt wrote is already
frozen and is read as it is; a SavedModel as its user exported it (tables behind function calls,
initialized from constants or from an ``assets/`` file) is frozen first, which is only done for
signatures with string inputs, whose generated inputs would otherwise all miss.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Sequence

import numpy as np

from optimizer.errors import TfoptError
from optimizer.graph.consts import resolve_through_identity, values_from_const
from optimizer.graph.lookup_tables import HIT_NODE, SCOPE
from optimizer.graph.names import node_name_from_input
from optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from optimizer.model.signature import SignatureInfo

log = logging.getLogger(__name__)

_HIT_SUFFIX = f"/{SCOPE}/{HIT_NODE}"


def _kind(dtype_kind: str) -> str:
    return "int" if dtype_kind in "iu" else "string"


def folded_tables(graph_def) -> list[tuple[str, np.ndarray]]:
    """(node the table's keys come in from, its keys) for every folded table in the graph."""
    nodes = {n.name: n for n in graph_def.node}
    tables = []
    for node in graph_def.node:
        if node.op != "Equal" or not node.name.endswith(_HIT_SUFFIX) or len(node.input) < 2:
            continue
        found = nodes.get(node_name_from_input(node.input[0]))
        keys = (resolve_through_identity(nodes, found.input[0])
                if found is not None and found.input else None)
        if keys is None or keys.op != "Const":
            continue
        tables.append((node_name_from_input(node.input[1]), values_from_const(keys).reshape(-1)))
    return tables


def infer_vocabularies(graph_def, signature: SignatureInfo) -> dict[str, np.ndarray]:
    """Input key -> the keys of the folded tables it reaches (string and integer inputs)."""
    tables = folded_tables(graph_def)
    if not tables:
        return {}
    consumers = collections.defaultdict(list)
    for node in graph_def.node:
        for inp in node.input:
            if not inp.startswith("^"):
                consumers[node_name_from_input(inp)].append(node.name)
    found = {}
    for spec in signature.inputs:
        if spec.dtype != "string" and not spec.dtype.startswith(("int", "uint")):
            continue
        kind = "string" if spec.dtype == "string" else "int"
        reached, frontier = set(), [node_name_from_input(spec.tensor_name)]
        while frontier:
            name = frontier.pop()
            if name not in reached:
                reached.add(name)
                frontier.extend(consumers[name])
        keys = [k for source, k in tables
                if source in reached and _kind(k.dtype.kind) == kind]
        if keys:
            merged = np.concatenate(keys)
            _, first = np.unique(merged, return_index=True)
            found[spec.key] = merged[np.sort(first)]
    return found


def _read_saved_models(paths: Sequence[str | os.PathLike], signature_name: str, infer,
                       freeze_first: bool, unknown: str, policy: ScanPolicy) -> dict:
    """``infer(graph_def, signature)`` on the first SavedModel among ``paths`` whose serving
    graph shows something (a SavedModel tfopt wrote is frozen already), else, when
    ``freeze_first``, on the first one frozen; {} when none shows anything (``unknown``: what
    that costs, logged if freezing fails). The models are read under ``policy``
    (:mod:`optimizer.model.op_scan`)."""
    from optimizer.model.savedmodel import read_saved_model_proto, serving_meta_graph

    for path in paths:
        meta_graph = serving_meta_graph(read_saved_model_proto(path, policy), path)
        if signature_name not in meta_graph.signature_def:
            continue
        written = SignatureInfo.from_signature_def(signature_name,
                                                   meta_graph.signature_def[signature_name])
        found = infer(meta_graph.graph_def, written)
        if found:
            return found
    if not paths or not freeze_first:
        return {}
    from optimizer.model.freeze import freeze

    try:
        frozen = freeze(paths[0], signature_name, policy=policy)
    except TfoptError as exc:
        log.warning("%s (%s)", unknown, exc)
        return {}
    return infer(frozen.graph_def, frozen.signature)


def saved_model_vocabularies(paths: Sequence[str | os.PathLike], signature_name: str,
                             signature: SignatureInfo, *, policy: ScanPolicy = DEFAULT_POLICY
                             ) -> dict[str, np.ndarray]:
    """Vocabularies for ``signature``'s inputs from the first of the SavedModels at ``paths``
    that shows them; {} when none does (generated strings then all miss the tables). The
    models are read under ``policy`` (:mod:`optimizer.model.op_scan`)."""
    return _read_saved_models(
        paths, signature_name, infer_vocabularies,
        freeze_first=any(s.dtype == "string" for s in signature.inputs),
        unknown="no vocabulary for the generated string inputs: they all miss the model's tables",
        policy=policy)


def saved_model_int_ranges(paths: Sequence[str | os.PathLike],
                           signature_name: str, *, policy: ScanPolicy = DEFAULT_POLICY
                           ) -> dict[str, tuple[int, int]]:
    """``key -> (0, rows)`` for integer inputs that index an embedding, read as
    :func:`saved_model_vocabularies` reads tokens; {} when no SavedModel shows any (generated
    ids then stay 0 and 1)."""
    from optimizer.inputs.generated import infer_int_ranges

    return _read_saved_models(paths, signature_name, infer_int_ranges, freeze_first=True,
                              unknown="integer inputs generated as 0 and 1 only: the size of "
                                      "the embedding they index is unknown", policy=policy)
