"""Walking a GraphDef: node lookup, consumers, reachability."""

from __future__ import annotations

import collections
from collections.abc import Iterable

from tfopt.optimizer.graph.names import is_control_input, node_name_from_input


def nodes_by_name(graph_def) -> dict:
    return {n.name: n for n in graph_def.node}


def consumers(graph_def) -> dict[str, list]:
    """node name -> nodes that read it (data or control)."""
    result = collections.defaultdict(list)
    for node in graph_def.node:
        for inp in node.input:
            result[node_name_from_input(inp)].append(node)
    return result


def data_consumer_count(graph_def) -> collections.Counter:
    """node name -> number of data (non-control) edges leaving it."""
    counts = collections.Counter()
    for node in graph_def.node:
        for inp in node.input:
            if not is_control_input(inp):
                counts[node_name_from_input(inp)] += 1
    return counts


def reachable_from(graph_def, roots: Iterable[str]) -> set[str]:
    """Names of ``roots`` and every node they depend on, through data and control edges."""
    by_name = nodes_by_name(graph_def)
    seen: set[str] = set()
    stack = [r for r in roots if r in by_name]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack.extend(node_name_from_input(i) for i in by_name[name].input)
    return seen
