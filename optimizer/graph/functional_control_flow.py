"""Functional control flow in a frozen GraphDef: ``While``/``If`` nodes whose cond, body and
branches are functions of the graph's library.

Freezing keeps a model's loops and conds in this form (:mod:`tfopt.optimizer.model.freeze`) instead of
lowering them to Enter/Merge/Switch frames: XLA compiles a functional ``While`` but not a frame,
a converter or :mod:`tfopt.optimizer.transforms.unroll_static_loops` can read a loop's trip count and
body as a unit, and a rewrite of the main graph cannot break a frame it does not see. The
price: the main graph's transforms see each loop as one opaque node and leave its body (a
library function) as it is.

``_lower_using_switch_merge`` decides what the runtime does with such a node. tf.function sets
it to true on every While/If it builds, so that the executor (eager functions, a TF1 Session,
TF Serving) lowers it to a frame when it loads the graph and runs the body inline;
``convert_variables_to_constants_v2(lower_control_flow=False)`` sets it to false, so that
Grappler keeps the functional form while it inlines the function calls, and leaves it so. Left
false, the runtime runs the loop as a ``While`` kernel calling its cond and body as separate
functions every iteration: a bidirectional LSTM of 20 steps ran 3-4x slower than the stock
SavedModel that way. :func:`lower_at_load` sets it back to true.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

WHILE_OPS = frozenset({"While", "StatelessWhile"})
IF_OPS = frozenset({"If", "StatelessIf"})
CASE_OPS = frozenset({"Case", "StatelessCase"})
FUNCTIONAL_CONTROL_FLOW_OPS = WHILE_OPS | IF_OPS | CASE_OPS
LOWERING_ATTR = "_lower_using_switch_merge"
_VERSION_SUFFIX = re.compile(r"__tfopt_[0-9a-f]{10}$")


def called_functions(node, library: dict | frozenset | set) -> Iterator[str]:
    """Functions ``node`` calls: its ``func`` attributes (and those nested in them), or its op
    type when that names a library function."""
    if node.op in library:
        yield node.op
    pending = list(node.attr.values())
    while pending:
        value = pending.pop()
        kind = value.WhichOneof("value")
        if kind == "func":
            yield value.func.name
            pending.extend(value.func.attr.values())
        elif kind == "list":
            for func in value.list.func:
                yield func.name
                pending.extend(func.attr.values())


def library_by_name(graph_def) -> dict:
    return {f.signature.name: f for f in graph_def.library.function}


def reachable_functions(graph_def) -> set[str]:
    """Names of the library functions the main graph calls, directly or through other functions."""
    library = library_by_name(graph_def)
    seen: set[str] = set()
    pending = [name for node in graph_def.node for name in called_functions(node, library)]
    while pending:
        name = pending.pop()
        if name in seen or name not in library:
            continue
        seen.add(name)
        pending.extend(called for node in library[name].node_def
                       for called in called_functions(node, library))
    return seen


def missing_function_problems(graph_def) -> list[str]:
    """One line per node (of the graph or of a library function) that calls a function the
    library does not hold."""
    library = library_by_name(graph_def)
    owners = [("", graph_def.node)] + [(f" in function '{name}'", f.node_def)
                                       for name, f in library.items()]
    problems = []
    for where, nodes in owners:
        for node in nodes:
            if not any(value.WhichOneof("value") in ("func", "list") for value in
                       node.attr.values()):
                continue
            problems += [f"node '{node.name}'{where} calls missing function '{name}'"
                         for name in called_functions(node, library) if name not in library]
    return problems


def functional_nodes(graph_def) -> list:
    """The main graph's While/If/Case nodes."""
    return [node for node in graph_def.node if node.op in FUNCTIONAL_CONTROL_FLOW_OPS]


def describe_functional_nodes(graph_def) -> str | None:
    """``"2 While"`` / ``"1 While, 3 If"``: the main graph's functional control flow, or None."""
    counts: dict[str, int] = {}
    for node in functional_nodes(graph_def):
        counts[node.op] = counts.get(node.op, 0) + 1
    return ", ".join(f"{n} {op}" for op, n in sorted(counts.items())) or None


def lower_at_load(graph_def) -> int:
    """Set ``_lower_using_switch_merge`` to true on every While/If/Case of the graph and of its
    library, in place, as tf.function does outside XLA; returns how many it changed."""
    changed = 0
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    for node in nodes:
        if node.op in FUNCTIONAL_CONTROL_FLOW_OPS and not (
                LOWERING_ATTR in node.attr and node.attr[LOWERING_ATTR].b):
            node.attr[LOWERING_ATTR].b = True
            changed += 1
    return changed


def prune_unreachable_functions(graph_def) -> list[str]:
    """Drop, in place, the library functions nothing calls any more (e.g. the cond and body of
    an unrolled loop) and the gradients registered for them; returns their names."""
    keep = reachable_functions(graph_def)
    dropped = [f.signature.name for f in graph_def.library.function
               if f.signature.name not in keep]
    if dropped:
        kept = [f for f in graph_def.library.function if f.signature.name in keep]
        del graph_def.library.function[:]
        graph_def.library.function.extend(kept)
        gradients = [g for g in graph_def.library.gradient if g.function_name in keep]
        del graph_def.library.gradient[:]
        graph_def.library.gradient.extend(gradients)
    return dropped


def rename_changed_functions(before, after) -> dict[str, str]:
    """Give every function of ``after``'s library whose body differs from the function of the
    same name in ``before`` a name of its own, in place, and make every caller use it; returns
    ``{old name: new name}``.

    A process holds one function per name: loading a graph whose ``while_body`` was rewritten
    where the original ``while_body`` is already loaded (the benchmark loads the source and
    its candidates side by side) fails with "Attempting to add a duplicate function with name
    ... where the previous and current definitions differ". The new name is the old one (less
    any suffix an earlier rename gave it) plus a digest of the new body.
    """
    old = library_by_name(before)
    renames = {}
    for function in after.library.function:
        name = function.signature.name
        if name in old and (old[name].SerializeToString(deterministic=True)
                            != function.SerializeToString(deterministic=True)):
            digest = hashlib.sha256(function.SerializeToString(deterministic=True)).hexdigest()
            renames[name] = f"{_VERSION_SUFFIX.sub('', name)}__tfopt_{digest[:10]}"
    if renames:
        _rename_functions(after, renames)
    return renames


def _rename_functions(graph_def, renames: dict[str, str]) -> None:
    def rename_in(attrs) -> None:
        pending = list(attrs.values())
        while pending:
            value = pending.pop()
            kind = value.WhichOneof("value")
            funcs = [value.func] if kind == "func" else list(value.list.func) \
                if kind == "list" else []
            for func in funcs:
                func.name = renames.get(func.name, func.name)
                pending.extend(func.attr.values())

    for node in list(graph_def.node) + [n for f in graph_def.library.function
                                        for n in f.node_def]:
        node.op = renames.get(node.op, node.op)
        rename_in(node.attr)
    for function in graph_def.library.function:
        function.signature.name = renames.get(function.signature.name, function.signature.name)
    for gradient in graph_def.library.gradient:
        gradient.function_name = renames.get(gradient.function_name, gradient.function_name)


@dataclass(frozen=True)
class FunctionGraph:
    """A library function as a plain GraphDef: a Placeholder per argument, its nodes with their
    inputs in GraphDef spelling (``node:index``), and the tensor behind each result."""

    graph_def: object
    arguments: tuple[str, ...]  # placeholder node names, in argument order
    results: tuple[str, ...]  # tensor names (``node:index``), in result order
    control_results: tuple[str, ...]  # nodes that must run when the function is called


def function_graph(graph_def, name: str, input_shapes=None) -> FunctionGraph:
    """The function ``name`` of ``graph_def``'s library as a :class:`FunctionGraph`, its
    argument placeholders shaped by ``input_shapes`` (TensorShapes, one per argument) if given.

    Raises ValueError when TensorFlow cannot read the function's body (an op or a nested
    function it does not know)."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    fdef = library_by_name(graph_def)[name]
    body, flat_names = function_def_to_graph_def(fdef, input_shapes=input_shapes)
    results = []
    for arg in fdef.signature.output_arg:
        nested = fdef.ret[arg.name]
        if nested in flat_names:
            results.append(flat_names[nested])
        elif ":" not in nested:  # a result that is an argument, returned as it came in
            results.append(f"{nested}:0")
        else:
            raise ValueError(f"function '{name}': result '{arg.name}' reads '{nested}', which "
                             "its body does not define")
    controls = tuple(fdef.control_ret[c] for c in fdef.signature.control_output
                     if c in fdef.control_ret)
    return FunctionGraph(graph_def=body,
                         arguments=tuple(arg.name for arg in fdef.signature.input_arg),
                         results=tuple(results), control_results=controls)
