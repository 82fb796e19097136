"""Structural checks run before and after every rewrite: duplicate names, dangling inputs, calls
to functions the library does not hold."""

from __future__ import annotations

import collections

from tfopt.optimizer.graph.functional_control_flow import missing_function_problems
from tfopt.optimizer.graph.names import node_name_from_input


class InvalidGraphError(ValueError):
    pass


def graph_problems(graph_def) -> list[str]:
    problems = []
    counts = collections.Counter(n.name for n in graph_def.node)
    problems += [f"duplicate node name '{name}'" for name, c in counts.items() if c > 1]
    for node in graph_def.node:
        for inp in node.input:
            if node_name_from_input(inp) not in counts:
                problems.append(f"node '{node.name}' reads missing node '{inp}'")
    return problems + missing_function_problems(graph_def)


def validate_graph(graph_def, where: str = "graph") -> None:
    problems = graph_problems(graph_def)
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise InvalidGraphError(f"{where} is invalid: {'; '.join(problems[:3])}{more}")
