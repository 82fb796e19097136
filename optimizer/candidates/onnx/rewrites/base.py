"""The fixed routine every rewrite runs in: count the ops, rewrite, drop the dead nodes, check,
log the delta. A rewrite writes only its ``ModelProto -> ModelProto`` function.

As tf2onnx's optimizer base does, a rewrite that raises, or whose result fails the check, is
logged and skipped: the graph it was given goes on unchanged. A pattern that does not match is
not an error: the function returns the model it was given (the same object), which is how the
routine knows nothing changed.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import onnx

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rewrite:
    name: str
    function: Callable[[onnx.ModelProto], onnx.ModelProto]


def op_counts(model: onnx.ModelProto) -> Counter:
    return Counter(node.op_type for node in model.graph.node)


def apply_rewrite(rewrite: Rewrite, model: onnx.ModelProto) -> onnx.ModelProto:
    """``rewrite`` applied to ``model``, dead nodes eliminated; ``model`` itself when the
    rewrite found nothing to do, raised, or broke the graph."""
    try:
        result = rewrite.function(model)
        if result is model:
            return model
        result = eliminate_dead_nodes(result)
        check_graph(result, model)
    except Exception:  # a failing rewrite must not lose the graph
        log.warning("ONNX rewrite %s failed; the graph goes on without it", rewrite.name,
                    exc_info=True)
        return model
    before, after = op_counts(model), op_counts(result)
    delta = {op: after[op] - before[op] for op in sorted(before | after)
             if after[op] != before[op]}
    log.info("ONNX rewrite %s: %d -> %d nodes %s", rewrite.name, before.total(),
             after.total(), delta)
    return result


def _subgraph_reads(node: onnx.NodeProto) -> Iterable[str]:
    """The names a node's subgraphs (If, Loop, Scan bodies) read, outer-scope ones included."""
    for a in node.attribute:
        for graph in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            for inner in graph.node:
                yield from inner.input
                yield from _subgraph_reads(inner)


def eliminate_dead_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the nodes and initializers no graph output depends on (a copy when
    anything goes; ``model`` itself otherwise)."""
    graph = model.graph
    needed = {o.name for o in graph.output}
    alive = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            alive.append(node)
            needed.update(node.input)
            needed.update(_subgraph_reads(node))
    initializers = [i for i in graph.initializer if i.name in needed]
    if len(alive) == len(graph.node) and len(initializers) == len(graph.initializer):
        return model
    produced = {o for node in alive for o in node.output} | {i.name for i in graph.input}
    produced |= {i.name for i in initializers}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(reversed(alive))
    del result.graph.initializer[:]
    result.graph.initializer.extend(initializers)
    value_info = [v for v in graph.value_info if v.name in produced]
    del result.graph.value_info[:]
    result.graph.value_info.extend(value_info)
    return result


def check_graph(result: onnx.ModelProto, original: onnx.ModelProto) -> None:
    """Raise ValueError unless ``result`` is a well-formed graph with ``original``'s inputs and
    outputs: every node reads only what an earlier node, an input or an initializer gives, and
    no tensor is written twice."""
    if list(result.graph.input) != list(original.graph.input) or \
            list(result.graph.output) != list(original.graph.output):
        raise ValueError("the rewrite changed the graph's inputs or outputs")
    known = {i.name for i in result.graph.input} | {i.name for i in result.graph.initializer}
    for node in result.graph.node:
        missing = [name for name in node.input if name and name not in known]
        if missing:
            raise ValueError(f"node {node.name!r} ({node.op_type}) reads {missing}, which "
                             f"nothing before it writes")
        for output in node.output:
            if output in known:
                raise ValueError(f"{output!r} is written twice")
        known.update(o for o in node.output if o)
    missing = [o.name for o in result.graph.output if o.name not in known]
    if missing:
        raise ValueError(f"nothing writes the graph outputs {missing}")
