"""The tokens a model's inputs expect: the keys of the lookup tables each input feeds.

Inputs generated for the equivalence check and the benchmark (:func:`tfopt.optimizer.inputs.generated.
make_inputs`) must hit a table as well as miss it: random strings would only ever test the
out-of-vocabulary path. The keys come from the frozen graph, where every table the signature
reads is folded into a sorted constant (:mod:`tfopt.optimizer.graph.lookup_tables`); an input's
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

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.graph.consts import resolve_through_identity, values_from_const
from tfopt.optimizer.graph.lookup_tables import HIT_NODE, SCOPE
from tfopt.optimizer.graph.names import node_name_from_input
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.signature import SignatureInfo

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


def saved_model_input_draws(paths: Sequence[str | os.PathLike], signature_name: str,
                            signature: SignatureInfo, *, policy: ScanPolicy = DEFAULT_POLICY
                            ) -> tuple[dict[str, np.ndarray], dict[str, tuple[int, int]]]:
    """What generated inputs for ``signature`` draw from, read from the SavedModels at
    ``paths`` in one pass over them (a frozen SavedModel's graph holds its weights: each is
    parsed once): the vocabularies of inputs that key a table, and ``key -> (0, rows)`` for the
    other integer inputs, which index an embedding. Each comes from the first SavedModel whose
    serving graph shows it (one tfopt wrote is frozen already), else from the first one frozen,
    frozen only when a string input has no vocabulary or an integer input no range. {} for
    what no model shows: generated strings then all miss the tables, generated ids stay 0 and
    1. The models are read under ``policy`` (:mod:`tfopt.optimizer.model.op_scan`)."""
    from tfopt.optimizer.inputs.generated import infer_int_ranges
    from tfopt.optimizer.model.savedmodel import read_saved_model_proto, serving_meta_graph

    def ranges_needed(vocabularies: dict) -> bool:
        return any(s.dtype.startswith(("int", "uint")) and s.key not in vocabularies
                   for s in signature.inputs)

    def without_vocabularies(ranges: dict, vocabularies: dict) -> dict:
        return {k: v for k, v in ranges.items() if k not in vocabularies}

    vocabularies: dict = {}
    ranges: dict = {}
    for path in paths:
        meta_graph = serving_meta_graph(read_saved_model_proto(path, policy), path)
        if signature_name not in meta_graph.signature_def:
            continue
        written = SignatureInfo.from_signature_def(signature_name,
                                                   meta_graph.signature_def[signature_name])
        vocabularies = vocabularies or infer_vocabularies(meta_graph.graph_def, written)
        ranges = ranges or infer_int_ranges(meta_graph.graph_def, written)
        if vocabularies and (ranges or not ranges_needed(vocabularies)):
            break
    no_vocabulary = not vocabularies and any(s.dtype == "string" for s in signature.inputs)
    no_ranges = not without_vocabularies(ranges, vocabularies) and ranges_needed(vocabularies)
    if paths and (no_vocabulary or no_ranges):
        from tfopt.optimizer.model.freeze import freeze

        try:
            frozen = freeze(paths[0], signature_name, policy=policy)
        except TfoptError as exc:
            log.warning("generated inputs drawn without the model's vocabularies or embedding "
                        "sizes (%s): strings all miss its tables, ids stay 0 and 1", exc)
        else:
            if no_vocabulary:
                vocabularies = infer_vocabularies(frozen.graph_def, frozen.signature)
            if no_ranges:
                ranges = infer_int_ranges(frozen.graph_def, frozen.signature)
    return vocabularies, without_vocabularies(ranges, vocabularies)


def saved_model_vocabularies(paths: Sequence[str | os.PathLike], signature_name: str,
                             signature: SignatureInfo, *, policy: ScanPolicy = DEFAULT_POLICY
                             ) -> dict[str, np.ndarray]:
    """Vocabularies for ``signature``'s inputs (:func:`saved_model_input_draws`)."""
    return saved_model_input_draws(paths, signature_name, signature, policy=policy)[0]
