"""While loops whose trip count is fixed by the graph's constants, and unrolling them.

A Keras RNN layer over a fixed sequence length runs a ``While`` whose condition reads only a
step counter and the length, both constants once the model is frozen. Such a loop runs the same
number of times for every input, so it can be written out as that many copies of its body:
straight-line ops that a graph rewrite, Grappler's fusions and the LiteRT converter all see,
with no loop machinery per step.

:func:`analyse_loop` finds the trip count by running the loop's *static* part: the loop
variables whose initial value is a constant of the graph and whose next value the body computes
from static variables alone (a counter, a bound). The condition must read static variables only;
one that reads a value computed from the model's inputs (a ``tf.while_loop`` bounded by an
input, a loop until convergence) is refused as data-dependent. :func:`unroll_loop` then copies
the body once per trip, static variables fed as constants, and rewires the loop's readers to the
last copy's results.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.errors import first_line
from tfopt.optimizer.graph.const_eval import constant_subgraph, constant_values, is_pure
from tfopt.optimizer.graph.consts import resolve_through_identity
from tfopt.optimizer.graph.functional_control_flow import (
    WHILE_OPS,
    FunctionGraph,
    function_graph,
    library_by_name,
)
from tfopt.optimizer.graph.names import (
    canonical_input,
    is_control_input,
    node_name_from_input,
    output_index,
)
from tfopt.optimizer.graph.rewrite import drop_nodes, make_const, remove_unread, unique_name

log = logging.getLogger(__name__)

UNROLLED_SCOPE = "unrolled"
_HANDLE_TYPES = frozenset({20, 21})  # DT_RESOURCE, DT_VARIANT


@dataclass(frozen=True)
class StaticLoop:
    """A While node that can be unrolled: its trip count and what each trip needs."""

    node: str
    trips: int
    body: FunctionGraph
    # For trip k (0 <= k <= trips): loop variable index -> its value at the start of trip k,
    # for the static variables only; entry ``trips`` holds the values the loop returns.
    static_values: tuple[dict[int, np.ndarray], ...]

    @property
    def added_nodes(self) -> int:
        """At most what unrolling adds: a copy of the body per trip (fewer once the copies of
        loop-invariant nodes are shared and unread ones dropped)."""
        return self.trips * _copied_nodes(self.body)


def _copied_nodes(body: FunctionGraph) -> int:
    """Nodes one copy of the body adds (its argument placeholders are not copied)."""
    return len(body.graph_def.node) - len(body.arguments)


class NotStatic(ValueError):
    """Why a loop cannot be unrolled, in words for a warning."""


class TooManyTrips(Exception):
    """The loop's static part ran past the trip count the node cap allows."""


def analyse_loop(graph_def, node, max_nodes: int) -> StaticLoop:
    """The trip count of While ``node`` and its static values; raises :class:`NotStatic`,
    also when unrolling would add more than ``max_nodes`` nodes."""
    if node.op not in WHILE_OPS:
        raise NotStatic(f"it is a {node.op}, not a While")
    try:
        cond = function_graph(graph_def, node.attr["cond"].func.name)
        body = function_graph(graph_def, node.attr["body"].func.name)
    except (ValueError, KeyError) as exc:
        raise NotStatic(f"its cond or body cannot be read: {exc}") from None
    inputs = [i for i in node.input if not is_control_input(i)]
    if len(inputs) != len(body.arguments) or len(body.results) != len(inputs):
        raise NotStatic(f"it has {len(inputs)} loop variables but its body takes "
                        f"{len(body.arguments)} and returns {len(body.results)}")
    stateful = sorted({n.op for n in body.graph_def.node
                       if n.name not in body.arguments and not _pure_or_call(n)})
    if stateful:
        raise NotStatic(f"its body runs stateful op(s) {', '.join(stateful)}, whose order "
                        f"unrolling could change")
    # A variant (a TensorList) or resource loop variable is never static: its value is a handle.
    types = list(node.attr["T"].list.type)
    plain = [t for t, dtype in zip(inputs, types) if dtype not in _HANDLE_TYPES]
    initial = constant_values(graph_def, plain)
    static = _static_variables(body, {i for i, t in enumerate(inputs) if t in initial})
    needed = _arguments_read(cond, cond.results[0])
    dynamic = sorted(needed - static)
    if dynamic:
        by_name = {n.name: n for n in graph_def.node}
        names = ", ".join(f"{i} (from '{_origin(by_name, inputs[i])}')" for i in dynamic[:3])
        raise NotStatic(f"its trip count is data-dependent: the condition reads loop "
                        f"variable(s) {names}, which are not constants of the graph")
    body_nodes = _copied_nodes(body)
    max_trips = max_nodes // max(body_nodes, 1)
    try:
        values = _run_static_part(graph_def, cond, body, static,
                                  {i: initial[inputs[i]] for i in static}, max_trips)
    except TooManyTrips:
        raise NotStatic(f"unrolled, it would add more than {max_nodes} nodes: it runs more "
                        f"than {max_trips} times and its body has {body_nodes} nodes") from None
    return StaticLoop(node=node.name, trips=len(values) - 1, body=body,
                      static_values=tuple(values))


def _origin(by_name: dict, tensor: str) -> str:
    """The node behind ``tensor`` past Identity wrappers: the input a frozen call reads."""
    node = resolve_through_identity(by_name, tensor)
    return node.name if node is not None else tensor


def loop_key(graph_def, node) -> str:
    """A digest of what :func:`analyse_loop` of While ``node`` depends on (the node, its cond
    and body, the constant subgraphs its inputs are computed from), to remember analyses by."""
    digest = hashlib.sha256(node.SerializeToString(deterministic=True))
    library = library_by_name(graph_def)
    for attr in ("cond", "body"):
        function = library.get(node.attr[attr].func.name)
        if function is not None:
            digest.update(function.SerializeToString(deterministic=True))
    by_name = {n.name: n for n in graph_def.node}
    memo: dict[str, bool] = {}
    for inp in node.input:
        if is_control_input(inp):
            continue
        digest.update(inp.encode())
        for name in sorted(constant_subgraph(by_name, inp, memo) or ()):
            digest.update(by_name[name].SerializeToString(deterministic=True))
    return digest.hexdigest()


def _pure_or_call(node) -> bool:
    # A body may hold a nested functional loop or cond; it is copied as it is.
    return node.op in ("Placeholder", "NoOp") or is_pure(node) or node.op in (
        "StatelessWhile", "StatelessIf", "StatelessCase", "PartitionedCall")


def _arguments_read(function: FunctionGraph, tensor: str) -> set[int]:
    """Indices of the arguments ``tensor``'s value depends on; every argument (as a marker of
    "not static") when a stateful node is on the way."""
    by_name = {n.name: n for n in function.graph_def.node}
    positions = {name: i for i, name in enumerate(function.arguments)}
    found: set[int] = set()
    seen: set[str] = set()
    pending = [node_name_from_input(tensor)]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in positions:
            found.add(positions[name])
            continue
        node = by_name[name]
        if not is_pure(node):
            return set(range(len(function.arguments)))
        pending.extend(node_name_from_input(i) for i in node.input if not is_control_input(i))
    return found


def _static_variables(body: FunctionGraph, constant_initially: set[int]) -> set[int]:
    """The loop variables that stay constant-valued: a constant initial value, and a next value
    computed from such variables only (a fixed point, shrinking from the constant ones)."""
    static = set(constant_initially)
    reads = {i: _arguments_read(body, body.results[i]) for i in static}
    while True:
        dropped = {i for i in static if not reads[i] <= static}
        if not dropped:
            return static
        static -= dropped


def _run_static_part(graph_def, cond: FunctionGraph, body: FunctionGraph, static: set[int],
                     initial: dict[int, np.ndarray], max_trips: int) -> list[dict]:
    """Static values at the start of each trip, and after the last one, found by running the
    condition and the static part of the body, one trip at a time."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        for scope, function in (("cond", cond), ("body", body)):
            part = tf.compat.v1.GraphDef()
            part.CopyFrom(function.graph_def)
            part.library.CopyFrom(graph_def.library)  # nested calls
            tf.compat.v1.import_graph_def(part, name=scope)
    wanted = sorted(static)
    cond_fetch = [f"cond/{cond.results[0]}"]
    body_fetches = [f"body/{body.results[i]}" for i in wanted]
    cond_reads = _ops_read(graph, cond_fetch)
    body_reads = _ops_read(graph, body_fetches)
    values = [dict(initial)]
    with tf.compat.v1.Session(graph=graph) as session:
        while True:
            current = values[-1]
            feeds = {**{f"cond/{cond.arguments[i]}": current[i] for i in wanted
                        if i < len(cond.arguments)},
                     **{f"body/{body.arguments[i]}": current[i] for i in wanted}}
            try:
                # Feeding a placeholder the fetches do not read is an error in a Session.
                go_on = session.run(cond_fetch, {f"{k}:0": v for k, v in feeds.items()
                                                 if k in cond_reads})[0]
                if not go_on:
                    return values
                if len(values) > max_trips:
                    raise TooManyTrips()
                results = session.run(body_fetches, {f"{k}:0": v for k, v in feeds.items()
                                                     if k in body_reads})
            except tf.errors.OpError as exc:
                raise NotStatic(f"running its counter and condition failed: "
                                f"{first_line(exc)}") from None
            values.append(dict(zip(wanted, results)))


def _ops_read(graph, fetches: list[str]) -> set[str]:
    """Names of the ops ``fetches`` are computed from."""
    seen, pending = set(), [graph.get_tensor_by_name(f).op for f in fetches]
    while pending:
        op = pending.pop()
        if op.name not in seen:
            seen.add(op.name)
            pending.extend(t.op for t in op.inputs)
    return seen


def unroll_loop(graph_def, loop: StaticLoop, boundary) -> int:
    """Replace ``loop``'s While node in ``graph_def`` (in place) by ``loop.trips`` copies of
    its body, named ``<while>/unrolled/<trip>/<body node>``; returns how many nodes it added.

    Body nodes whose value is the same on every trip (constants, and what reads only them and
    the loop variables the body passes through unchanged, such as the weights) are copied once,
    under ``<while>/unrolled/invariant/``. Readers of ``while:i`` read the last copy's result
    ``i`` instead (see :func:`_replace_while`); copies nothing reads are dropped.
    """
    nodes = {n.name: n for n in graph_def.node}
    node = nodes[loop.node]
    before = len(graph_def.node)
    loop_inputs = [node_name_from_input(i) for i in node.input]
    controls = [i for i in node.input if is_control_input(i)]
    current = [canonical_input(i) for i in node.input if not is_control_input(i)]
    copier = _BodyCopier(graph_def, loop, set(nodes), node.device, controls)
    passed = _passed_through(loop.body)
    invariant_arguments = {loop.body.arguments[i]: current[i] for i in passed
                           if i not in loop.static_values[0]}
    invariant_arguments.update(copier.static_arguments(
        "invariant", {i: loop.static_values[0][i] for i in passed if i in loop.static_values[0]}))
    invariant = copier.copy(f"{loop.node}/{UNROLLED_SCOPE}/invariant/", invariant_arguments,
                            _invariant_nodes(loop.body, set(invariant_arguments)), {})
    for trip in range(loop.trips):
        arguments = dict(invariant_arguments)
        arguments.update(copier.static_arguments(trip, {
            i: v for i, v in loop.static_values[trip].items() if i not in passed}))
        arguments.update({name: current[i] for i, name in enumerate(loop.body.arguments)
                          if name not in arguments})
        renamed = copier.copy(f"{loop.node}/{UNROLLED_SCOPE}/{trip}/", arguments,
                              [n for n in loop.body.graph_def.node
                               if n.name not in arguments and n.name not in invariant], invariant)
        current = [_result(loop.body, i, arguments, renamed) for i in range(len(current))]
    final = copier.static_arguments("result", loop.static_values[loop.trips])
    for index, name in enumerate(loop.body.arguments):
        if name in final:
            current[index] = final[name]
    _replace_while(graph_def, node, current, controls, boundary)
    remove_unread(graph_def, copier.added + loop_inputs, boundary,
                  lambda n: n.op == "NoOp" or is_pure(n))
    return len(graph_def.node) - before


class _BodyCopier:
    """Writes copies of body nodes into the main graph, with fresh names."""

    def __init__(self, graph_def, loop: StaticLoop, taken: set, device: str, controls: list):
        self.graph_def, self.loop, self.taken = graph_def, loop, taken
        self.device, self.controls = device, controls
        self.added: list[str] = []

    def _name(self, base: str) -> str:
        name = unique_name(self.taken, base)
        self.taken.add(name)
        self.added.append(name)
        return name

    def static_arguments(self, scope, values: dict) -> dict[str, str]:
        """A Const per static argument value: argument name -> Const name."""
        made = {}
        for index, value in values.items():
            argument = self.loop.body.arguments[index]
            const = make_const(self._name(f"{self.loop.node}/{UNROLLED_SCOPE}/{scope}/{argument}"),
                               np.asarray(value), self.device)
            self.graph_def.node.append(const)
            made[argument] = const.name
        return made

    def copy(self, prefix: str, arguments: dict, body_nodes: list, shared: dict) -> dict:
        """Copy ``body_nodes`` under ``prefix``; an input names an argument (-> its tensor in
        ``arguments``), a node copied before (-> ``shared``) or one of these. Returns
        body node name -> copy name."""
        renamed = dict(shared)
        for body_node in body_nodes:
            renamed[body_node.name] = self._name(prefix + body_node.name)

        def remap(inp: str) -> str:
            source = node_name_from_input(inp)
            if source in arguments:
                return arguments[source]
            return canonical_input(f"{renamed[source]}:{output_index(inp)}")

        for body_node in body_nodes:
            copy = self.graph_def.node.add()
            copy.CopyFrom(body_node)
            copy.name = renamed[body_node.name]
            copy.device = body_node.device or self.device
            if "_class" in copy.attr:  # colocation with body nodes that now have other names
                del copy.attr["_class"]
            del copy.input[:]
            # The body runs no stateful op: its control edges order nothing observable, and
            # kept, they would keep its NoOps and the nodes they wait for alive in every copy.
            copy.input.extend(remap(i) for i in body_node.input if not is_control_input(i))
            if not copy.input and self.controls:
                copy.input.extend(self.controls)  # what the loop waited for, copies wait for
        return renamed


def _passed_through(body: FunctionGraph) -> set[int]:
    """Loop variables the body returns as it got them (the weights, the sequence's list)."""
    return {i for i, name in enumerate(body.arguments)
            if _past_identities(body, body.results[i]) == name}


def _past_identities(body: FunctionGraph, tensor: str) -> str:
    """``tensor`` of the body, past the Identity nodes it is read through (a body returns its
    results as Identities with control inputs, which copies drop)."""
    by_name = {n.name: n for n in body.graph_def.node}
    while (node := by_name.get(node_name_from_input(tensor))) is not None \
            and node.op == "Identity" and node.name not in body.arguments:
        tensor = next(i for i in node.input if not is_control_input(i))
    return canonical_input(tensor)


def _invariant_nodes(body: FunctionGraph, invariant_arguments: set[str]) -> list:
    """Body nodes computed from constants and invariant arguments alone, in body order."""
    invariant: set[str] = set()
    found = []
    for body_node in _in_execution_order(body.graph_def):
        if body_node.name in body.arguments:
            continue
        data = [node_name_from_input(i) for i in body_node.input if not is_control_input(i)]
        if is_pure(body_node) and all(d in invariant or d in invariant_arguments for d in data):
            invariant.add(body_node.name)
            found.append(body_node)
    return found


def _in_execution_order(graph_def) -> list:
    from tfopt.optimizer.graph.control_flow import execution_order

    return [graph_def.node[i] for i in execution_order(graph_def)]


def _result(body: FunctionGraph, index: int, arguments: dict, renamed: dict) -> str:
    """The tensor a copy of the body returns as result ``index``: the next trip reads the value
    itself, not the body's Identity of it, and the Identity copies go unread."""
    tensor = _past_identities(body, body.results[index])
    source = node_name_from_input(tensor)
    if source in arguments:
        return arguments[source]
    return canonical_input(f"{renamed[source]}:{output_index(tensor)}")


def _replace_while(graph_def, node, results: list[str], controls: list[str], boundary) -> None:
    """Readers of ``node:i`` read ``results[i]``; ``node`` goes, or stays as their IdentityN
    when it is in ``boundary``. A control input on it is dropped: the loop was checked to run
    no stateful op, so waiting for it changes no value, and keeping the edge would keep every
    copy alive."""
    for reader in graph_def.node:
        if not any(node_name_from_input(i) == node.name for i in reader.input):
            continue
        rewired = []
        for inp in reader.input:
            if node_name_from_input(inp) != node.name:
                rewired.append(inp)
            elif not is_control_input(inp):
                rewired.append(results[output_index(inp)])
        del reader.input[:]
        reader.input.extend(rewired)
    if node.name in boundary:
        name, device, types = node.name, node.device, list(node.attr["T"].list.type)
        node.Clear()
        node.name, node.op, node.device = name, "IdentityN", device
        node.input.extend(results + controls)
        node.attr["T"].list.type.extend(types)
        return
    drop_nodes(graph_def, {node.name})
