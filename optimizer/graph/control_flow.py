"""Lowered (v1) control flow in a GraphDef: its ops, a loop-aware execution order, and which
nodes run inside a while frame or a cond branch.

``freeze(..., lower_control_flow=True)`` lowers ``While``/``If`` to Enter/Merge/Switch/
NextIteration/Exit (the default keeps them functional: :mod:`.functional_control_flow`), and so
do Grappler's function pass and graphs written by TF1. That dataflow form has
rules a plain graph rewrite can break: a loop's Merge reads its NextIteration (a back edge, so
the graph is not a DAG), and a node gets its frame or its branch from its inputs, often only
from a control input (a Const inside a branch reads ``^pivot``).
"""

from __future__ import annotations

import heapq

from tfopt.optimizer.graph.names import (
    canonical_input,
    is_control_input,
    node_name_from_input,
    output_index,
)
from tfopt.optimizer.graph.validate import InvalidGraphError

SWITCH_OPS = frozenset({"Switch", "RefSwitch", "_SwitchN"})
MERGE_OPS = frozenset({"Merge", "RefMerge", "_XlaMerge"})
ENTER_OPS = frozenset({"Enter", "RefEnter"})
EXIT_OPS = frozenset({"Exit", "RefExit"})
NEXT_ITERATION_OPS = frozenset({"NextIteration", "RefNextIteration"})
LOOP_COND_OPS = frozenset({"LoopCond"})
CONTROL_FLOW_OPS = (SWITCH_OPS | MERGE_OPS | ENTER_OPS | EXIT_OPS | NEXT_ITERATION_OPS
                    | LOOP_COND_OPS | frozenset({"ControlTrigger"}))


def _is_back_edge(consumer, input_name: str, by_name: dict) -> bool:
    """A loop's Merge reading its NextIteration: the one edge allowed to point backwards."""
    if consumer.op not in MERGE_OPS or is_control_input(input_name):
        return False
    source = by_name.get(node_name_from_input(input_name))
    return source is not None and source.op in NEXT_ITERATION_OPS


def execution_order(graph_def) -> list[int]:
    """Indices of ``graph_def.node`` with every node after its inputs, loop back edges aside.

    Stable: among nodes that are ready, the one earliest in the graph goes first, so a graph that
    is already in order comes back unchanged. A Merge waits for all its inputs except
    NextIteration; only if that leaves nodes stuck does a Merge go once one data input is done
    (GTT's rule for every Merge). Raises InvalidGraphError for a cycle that is not a loop.
    """
    nodes = graph_def.node
    index = {node.name: i for i, node in enumerate(nodes)}
    by_name = {node.name: node for node in nodes}
    pending = [0] * len(nodes)
    readers: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for inp in node.input:
            source = node_name_from_input(inp)
            if source not in index:
                raise InvalidGraphError(f"node '{node.name}' reads missing node '{inp}'")
            if _is_back_edge(node, inp, by_name):
                continue
            pending[i] += 1
            readers[index[source]].append(i)

    order: list[int] = []
    done = [False] * len(nodes)
    released = [False] * len(nodes)
    ready = [i for i, count in enumerate(pending) if count == 0]
    for i in ready:
        released[i] = True
    heapq.heapify(ready)
    while True:
        while ready:
            i = heapq.heappop(ready)
            done[i] = True
            order.append(i)
            for reader in readers[i]:
                pending[reader] -= 1
                if pending[reader] == 0 and not released[reader]:
                    released[reader] = True
                    heapq.heappush(ready, reader)
        if len(order) == len(nodes):
            return order
        merge = next((i for i, node in enumerate(nodes)
                      if not released[i] and node.op in MERGE_OPS
                      and _one_data_input_done(node, index, done)), None)
        if merge is None:
            stuck = [nodes[i].name for i in range(len(nodes)) if not done[i]]
            raise InvalidGraphError(
                f"{len(stuck)} nodes in a cycle, e.g. {', '.join(stuck[:3])}")
        released[merge] = True
        heapq.heappush(ready, merge)


def _one_data_input_done(node, index: dict, done: list) -> bool:
    controls = [i for i in node.input if is_control_input(i)]
    data = [i for i in node.input if not is_control_input(i)]
    return (all(done[index[node_name_from_input(c)]] for c in controls)
            and any(done[index[node_name_from_input(d)]] for d in data))


def nodes_under_control_flow(graph_def) -> frozenset[str]:
    """Names of control-flow ops and of nodes that run inside a while frame or a cond branch.

    Frames follow TF's executor: Enter opens one, Exit closes it, every other node is in the
    frame of its inputs. Branches are tracked as guards ``(predicate, branch)`` added by a
    Switch output and dropped at the Merge that joins both branches (guards common to all of a
    Merge's forward data inputs survive it). Switches of a loop (predicate from LoopCond) add no
    guard: the frame already covers their nodes.
    """
    nodes = graph_def.node
    by_name = {node.name: node for node in nodes}
    frames: dict[str, tuple[str, ...]] = {}
    guards: dict[str, frozenset] = {}

    def edge_guards(input_name: str) -> frozenset:
        source = by_name[node_name_from_input(input_name)]
        found = guards.get(source.name, frozenset())
        if (source.op in SWITCH_OPS and not is_control_input(input_name)
                and len(source.input) > 1):
            predicate = by_name.get(node_name_from_input(source.input[1]))
            if predicate is None or predicate.op not in LOOP_COND_OPS:
                found = found | {(canonical_input(source.input[1]), output_index(input_name))}
        return found

    def frame_of(input_name: str) -> tuple[str, ...]:
        return frames.get(node_name_from_input(input_name), ())

    for i in execution_order(graph_def):
        node = nodes[i]
        data = [inp for inp in node.input if not is_control_input(inp)]
        controls = [inp for inp in node.input if is_control_input(inp)]
        if node.op in MERGE_OPS and data:
            forward = [inp for inp in data if not _is_back_edge(node, inp, by_name)] or data
            # A Merge runs once any data input arrives; a dead control input does not stop it.
            guards[node.name] = frozenset.intersection(*(edge_guards(inp) for inp in forward))
            frames[node.name] = frame_of(forward[0])
            continue
        guards[node.name] = frozenset().union(*(edge_guards(inp) for inp in node.input))
        if node.op in ENTER_OPS and data:
            frames[node.name] = frame_of(data[0]) + (node.attr["frame_name"].s.decode(),)
        elif node.op in EXIT_OPS and data:
            frames[node.name] = frame_of(data[0])[:-1]
        elif node.input:
            frames[node.name] = frame_of((data or controls)[0])
        else:
            frames[node.name] = ()
    return frozenset(node.name for node in nodes
                     if frames[node.name] or guards[node.name] or node.op in CONTROL_FLOW_OPS)
