"""The relaxed search keeps slower steps that enable wins, never returns a wrong graph, and stops.

The rules and the cost here are fakes, so every number is known in advance: Neg costs 10, Relu
5, the Snapshot "marker" and Identity 1. ``insert_marker`` puts a Snapshot in front of a Neg
(+1: worse), which lets ``cancel_negations`` replace Neg -> Snapshot -> Neg by one Identity
(-20). Starting from x -> Neg -> Neg -> Relu (cost 25), only a search that accepts the +1 step
reaches cost 6.
"""

import numpy as np
import pytest
from graph_testing import build_graph, op_counts, run_graph, tf

from tfopt.optimizer.graph.names import node_name_from_input
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.search.hashing import HASHED_CONSTANT_BYTES, canonical_hash
from tfopt.optimizer.search.remeasure import remeasure
from tfopt.optimizer.search.search import (
    SearchResult,
    continued_from,
    greedy_search,
    relaxed_search,
)
from tfopt.optimizer.search.substitution import Match, Substitution

OP_WEIGHTS = {"Neg": 10.0, "Relu": 5.0, "Abs": 4.5, "Snapshot": 1.0, "Identity": 1.0}
START_COST = 25.0  # Neg + Neg + Relu
WITH_MARKER_COST = 26.0
CANCELLED_COST = 6.0  # Identity + Relu


class FakeCost:
    """Sum of per-op weights; counts how often it was asked."""

    name = "fake-op-weights"

    def __init__(self):
        self.calls = 0

    def cost(self, graph_def) -> float:
        self.calls += 1
        return sum(OP_WEIGHTS.get(n.op, 0.0) for n in graph_def.node)


def _copy(graph_def):
    copy = type(graph_def)()
    copy.CopyFrom(graph_def)
    return copy


def _node(graph_def, name):
    return next(n for n in graph_def.node if n.name == name)


class InsertMarker(Substitution):
    """x -> Neg becomes x -> Snapshot -> Neg: the same values, one op more."""

    name = "insert_marker"

    def matches(self, graph_def, context):
        nodes = {n.name: n for n in graph_def.node}
        return [Match(self.name, (n.name,)) for n in graph_def.node
                if n.op == "Neg" and nodes[node_name_from_input(n.input[0])].op != "Snapshot"]

    def apply(self, graph_def, match, context):
        graph = _copy(graph_def)
        neg = _node(graph, match.nodes[0])
        marker = graph.node.add(name=f"{neg.name}/marker", op="Snapshot", input=[neg.input[0]])
        marker.attr["T"].CopyFrom(neg.attr["T"])
        neg.input[0] = marker.name
        return graph


class CancelNegations(Substitution):
    """Neg -> Snapshot -> Neg is the identity: the second Neg becomes an Identity of the first
    Neg's input (keeping its name), the first Neg and the marker go."""

    name = "cancel_negations"

    def matches(self, graph_def, context):
        nodes = {n.name: n for n in graph_def.node}
        found = []
        for second in graph_def.node:
            marker = nodes[node_name_from_input(second.input[0])] if second.input else None
            if second.op != "Neg" or marker is None or marker.op != "Snapshot":
                continue
            first = nodes[node_name_from_input(marker.input[0])]
            if first.op == "Neg":
                found.append(Match(self.name, (first.name, marker.name, second.name)))
        return found

    def apply(self, graph_def, match, context):
        first_name, marker_name, second_name = match.nodes
        graph = _copy(graph_def)
        source = _node(graph, first_name).input[0]
        second = _node(graph, second_name)
        second.op = "Identity"
        second.input[0] = source
        kept = [n for n in graph.node if n.name not in (first_name, marker_name)]
        del graph.node[:]
        graph.node.extend(kept)
        return graph


class ReluToAbs(Substitution):
    """Wrong on purpose: Relu -> Abs is a little cheaper under the fake cost (4.5 vs 5) and
    changes every negative output."""

    name = "relu_to_abs"

    def matches(self, graph_def, context):
        return [Match(self.name, (n.name,)) for n in graph_def.node if n.op == "Relu"]

    def apply(self, graph_def, match, context):
        graph = _copy(graph_def)
        _node(graph, match.nodes[0]).op = "Abs"
        return graph


class Explodes(Substitution):
    name = "explodes"

    def matches(self, graph_def, context):
        return [Match(self.name, ("x",))]

    def apply(self, graph_def, match, context):
        raise RuntimeError("this rule is broken")


RULES = [InsertMarker(), CancelNegations()]


def _negations_model(matmuls: int = 0):
    """x -> Neg -> Neg -> Relu; with ``matmuls``, x first goes through that many 1024x1024
    MatMuls, so that a call does real work and per-call overheads are small beside it."""
    width = 1024 if matmuls else 4

    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, width], name="x")
        rng = np.random.default_rng(0)
        hidden = x
        for _ in range(matmuls):
            hidden = tf.matmul(hidden, tf.constant(
                rng.standard_normal((width, width)) / np.sqrt(width), tf.float32))
        tf.nn.relu(tf.negative(tf.negative(hidden, name="neg1"), name="neg2"), name="out")
    signature = SignatureInfo(
        name="serving_default",
        inputs=(TensorSpecInfo("x", "x:0", "float32", (None, width)),),
        outputs=(TensorSpecInfo("out", "out:0", "float32", (None, width)),))
    return FrozenModel(build_graph(body), signature)


def _outputs(result_or_model):
    model = result_or_model.model if isinstance(result_or_model, SearchResult) \
        else result_or_model
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}
    return run_graph(model.graph_def, feeds, ["out"])[0]


def test_greedy_search_refuses_the_slower_step_and_finds_nothing():
    result = greedy_search(_negations_model(), RULES, FakeCost(), budget=50)
    assert result.input_cost == START_COST
    assert result.returned == "input" and result.trace == () and result.cost == START_COST
    assert result.stats.kept == 0
    assert result.stats.generated == 2  # a marker before either Neg, both +1, both dropped
    assert op_counts(result.model.graph_def)["Neg"] == 2


def test_relaxed_search_goes_through_the_slower_step_to_the_cheaper_graph():
    model = _negations_model()
    result = relaxed_search(model, RULES, FakeCost(), alpha=1.1, budget=50)
    assert result.returned == "best"
    assert result.cost == CANCELLED_COST
    counts = op_counts(result.model.graph_def)
    assert counts["Neg"] == 0 and counts["Snapshot"] == 0 and counts["Relu"] == 1
    np.testing.assert_array_equal(_outputs(result), _outputs(model))  # Neg(Neg(x)) is exact
    assert result.model.history[-1].startswith("search(alpha=1.1")


def test_the_trace_lists_the_substitutions_in_order_with_the_cost_after_each():
    result = relaxed_search(_negations_model(), RULES, FakeCost(), alpha=1.1, budget=50)
    assert [step.substitution for step in result.trace] == [
        "insert_marker(neg2)", "cancel_negations(neg1, neg2/marker, neg2)"]
    assert [step.cost for step in result.trace] == [WITH_MARKER_COST, CANCELLED_COST]
    assert result.substitutions == [step.substitution for step in result.trace]


def test_a_graph_reached_twice_is_costed_once_and_counted_as_a_duplicate():
    cost = FakeCost()
    result = relaxed_search(_negations_model(), RULES, cost, alpha=1.1, budget=50)
    # Markers before neg1 then neg2, or before neg2 then neg1: the same graph.
    assert result.stats.duplicates >= 1
    costed = result.stats.generated - result.stats.duplicates - result.stats.invalid \
        - result.stats.oversized
    assert cost.calls == 1 + costed  # the input, then each new graph exactly once
    assert result.stats.stopped_by == "exhausted"


def test_the_expansion_budget_stops_the_search():
    result = relaxed_search(_negations_model(), RULES, FakeCost(), alpha=1.1, budget=1)
    assert result.stats.expansions == 1 and result.stats.stopped_by == "budget"
    assert result.cost == START_COST  # one expansion only reaches the +1 graphs


def test_the_time_budget_stops_the_search():
    result = relaxed_search(_negations_model(), RULES, FakeCost(), alpha=1.1, budget=50,
                            time_budget=0.0)
    assert result.stats.expansions == 0 and result.stats.stopped_by == "time_budget"
    assert result.returned == "input"


def test_the_size_cap_drops_graphs_that_grow_too_much():
    result = relaxed_search(_negations_model(), RULES, FakeCost(), alpha=1.1, budget=50,
                            max_nodes_factor=1.0)
    assert result.stats.oversized == 2 and result.stats.kept == 0
    assert result.returned == "input"


def test_two_runs_give_the_same_trace_and_the_same_graph():
    first = relaxed_search(_negations_model(), RULES, FakeCost(), alpha=1.2, budget=50, seed=3)
    second = relaxed_search(_negations_model(), RULES, FakeCost(), alpha=1.2, budget=50, seed=3)
    assert first.trace == second.trace
    assert canonical_hash(first.model.graph_def) == canonical_hash(second.model.graph_def)
    assert first.stats.to_dict() | {"wall_seconds": 0} == \
        second.stats.to_dict() | {"wall_seconds": 0}


def test_a_cheaper_but_wrong_graph_is_never_returned():
    model = _negations_model()
    result = relaxed_search(model, RULES + [ReluToAbs()], FakeCost(), alpha=1.1, budget=50)
    # Cheapest under the fake cost: negations cancelled and Relu made Abs (5.5), which is wrong;
    # the right graph (6) comes next.
    assert result.returned == "fallback"
    assert result.rejected and all("relu_to_abs" in r for r in result.rejected)
    assert result.cost == CANCELLED_COST
    assert op_counts(result.model.graph_def)["Relu"] == 1
    np.testing.assert_allclose(_outputs(result), _outputs(model), atol=1e-6)


def test_when_every_cheaper_graph_is_wrong_the_input_is_returned():
    model = _negations_model()
    result = greedy_search(model, [ReluToAbs()], FakeCost(), budget=50)
    assert result.returned == "input" and len(result.rejected) == 1
    assert result.model is model and result.cost == START_COST


def test_a_rule_that_raises_is_counted_not_fatal():
    result = relaxed_search(_negations_model(), [Explodes()] + RULES, FakeCost(), alpha=1.1,
                            budget=50)
    assert result.stats.failed >= 1
    assert result.cost == CANCELLED_COST


def test_alpha_below_one_is_refused():
    with pytest.raises(ValueError, match="alpha"):
        relaxed_search(_negations_model(), RULES, FakeCost(), alpha=0.9)


def test_progress_is_reported_with_expansions_queue_and_best_cost():
    seen = []
    result = relaxed_search(_negations_model(), RULES, FakeCost(), alpha=1.1, budget=50,
                            progress=seen.append)
    assert seen, "progress is reported at least once, at the end"
    last = seen[-1]
    assert last.expansions == result.stats.expansions >= 2
    assert last.best_cost == CANCELLED_COST
    # the search ran out of graphs to expand before the budget: the final queue is empty
    assert result.stats.stopped_by == "exhausted" and last.queue_size == 0


def test_the_canonical_hash_ignores_node_order_but_not_content():
    graph = _negations_model().graph_def
    reordered = _copy(graph)
    nodes = list(reordered.node)[::-1]
    del reordered.node[:]
    reordered.node.extend(nodes)
    assert canonical_hash(reordered) == canonical_hash(graph)
    changed = _copy(graph)
    _node(changed, "neg2").op = "Identity"
    assert canonical_hash(changed) != canonical_hash(graph)


def _const_graph(values):
    def body():
        tf.constant(values, name="c")
    return build_graph(body)


def test_small_constants_are_hashed_by_value_and_large_ones_by_dtype_shape_and_size():
    small = np.arange(4, dtype=np.int32)
    assert canonical_hash(_const_graph(small)) != canonical_hash(_const_graph(small[::-1]))
    weights = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    assert weights.nbytes > HASHED_CONSTANT_BYTES
    # same structure and size: the same graph to a search that holds only equivalent graphs
    assert canonical_hash(_const_graph(weights)) == canonical_hash(_const_graph(weights * 2))
    assert canonical_hash(_const_graph(weights)) != canonical_hash(_const_graph(weights.T[:32]))
    assert canonical_hash(_const_graph(weights)) != canonical_hash(
        _const_graph(weights.astype(np.float64)))


def test_remeasure_times_the_input_and_the_result_end_to_end():
    model = _negations_model()
    result = relaxed_search(model, RULES, FakeCost(), alpha=1.1, budget=50)
    measured = remeasure(result, model, top_k=2, choose_fastest=False, min_runs=5,
                         min_seconds=0.05)
    names = [name for name, _, _ in measured.measured]
    assert names[:2] == ["input", "returned"]
    assert measured.measured_seconds > 0
    assert measured.measured_seconds == {n: s for n, _, s in measured.measured}["returned"]
    assert measured.returned == "best" and measured.trace == result.trace


def _slowed(model):
    """The same outputs, plus a 384x384 MatMul multiplied by zero: several times slower per
    call. The MatMul depends on the input, so Grappler cannot fold it away."""
    graph = _copy(model.graph_def)
    _node(graph, "out").name = "out_before"

    def body():
        tf.compat.v1.import_graph_def(graph, name="")
        default = tf.compat.v1.get_default_graph()
        x, before = (default.get_tensor_by_name(n) for n in ("x:0", "out_before:0"))
        weights = tf.constant(np.random.default_rng(1).standard_normal((384, 384)),
                              tf.float32)
        scaled = weights * tf.reduce_mean(x)
        waste = tf.reduce_sum(tf.matmul(scaled, weights)) * 0.0
        tf.add(before, waste, name="out")
    return model.with_graph(build_graph(body), step="slowed")


def _timed_twice(result, model, **kwargs):
    return remeasure(result, model, top_k=0, min_runs=60, min_seconds=1.0, **kwargs)


def test_remeasure_replaces_a_returned_graph_that_the_input_beats_with_confidence():
    model = _negations_model()
    result = relaxed_search(model, RULES, FakeCost(), alpha=1.1, budget=50)
    slow = SearchResult(**{**vars(result), "model": _slowed(model)})
    chosen = _timed_twice(slow, model)
    assert chosen.returned == "input" and chosen.model is model and chosen.trace == ()
    p50 = {name: seconds for name, _, seconds in chosen.measured}
    assert p50["input"] < p50["returned"]


def test_a_graph_measured_identical_to_another_is_timed_once():
    model = _negations_model()
    result = relaxed_search(model, RULES, FakeCost(), alpha=1.1, budget=50)
    same = remeasure(result, model, top_k=0, min_runs=5, min_seconds=0.05,
                     incumbent=("greedy", result))
    assert [name for name, _, _ in same.measured] == ["input", "returned"]
    assert same.returned == "best"


def test_the_incumbent_is_kept_unless_the_result_is_faster_with_confidence():
    model = _negations_model(matmuls=3)
    relaxed = relaxed_search(model, RULES, FakeCost(), alpha=1.1, budget=50)
    greedy = greedy_search(model, RULES, FakeCost(), budget=50)
    slow_relaxed = SearchResult(**{**vars(relaxed), "model": _slowed(model)})
    kept = _timed_twice(slow_relaxed, model, incumbent=("greedy", greedy))
    assert greedy.returned == "input"  # greedy finds nothing here: its graph is the input's
    assert kept.returned == "input" and kept.trace == () and kept.model is model
    # an incumbent with a graph of its own is returned under its own name, with its trace
    kept = _timed_twice(slow_relaxed, model, incumbent=("greedy", relaxed))
    assert kept.returned == "greedy" and kept.trace == relaxed.trace

    slow_greedy = SearchResult(**{**vars(greedy), "model": _slowed(model), "returned": "best"})
    replaced = _timed_twice(relaxed, model, incumbent=("greedy", slow_greedy))
    assert replaced.returned == "best" and replaced.trace == relaxed.trace


class ReluToMatMul(Substitution):
    """Makes a graph TensorFlow cannot load (a MatMul with one input): structurally valid,
    free under the fake cost, and never returned."""

    name = "relu_to_matmul"

    def matches(self, graph_def, context):
        return [Match(self.name, (n.name,)) for n in graph_def.node if n.op == "Relu"]

    def apply(self, graph_def, match, context):
        graph = _copy(graph_def)
        _node(graph, match.nodes[0]).op = "MatMul"
        return graph


def test_a_candidate_that_does_not_run_is_rejected_not_fatal():
    model = _negations_model()
    result = greedy_search(model, [ReluToMatMul()], FakeCost(), budget=5)
    assert result.returned == "input"
    assert len(result.rejected) == 1 and "does not run" in result.rejected[0]


class DropMarker(Substitution):
    """Removes one Snapshot marker (cheaper by 1); markers are independent of each other."""

    name = "drop_marker"
    commutes = True

    def matches(self, graph_def, context):
        return [Match(self.name, (n.name,)) for n in graph_def.node if n.op == "Snapshot"]

    def apply(self, graph_def, match, context):
        graph = _copy(graph_def)
        marker = _node(graph, match.nodes[0])
        for node in graph.node:
            node.input[:] = [marker.input[0] if i == marker.name else i for i in node.input]
        kept = [n for n in graph.node if n.name != marker.name]
        del graph.node[:]
        graph.node.extend(kept)
        return graph


def _with_markers(model):
    """Every Neg preceded by a Snapshot marker: cost +1 each, the same values."""
    with_markers = _copy(model.graph_def)
    for neg in ("neg1", "neg2"):
        node = _node(with_markers, neg)
        marker = with_markers.node.add(name=f"{neg}/marker", op="Snapshot", input=[node.input[0]])
        marker.attr["T"].CopyFrom(node.attr["T"])
        node.input[0] = marker.name
    return model.with_graph(with_markers, step="markers")


def test_a_search_continued_from_another_reads_as_one_search_from_its_input():
    model = _negations_model()
    start = _with_markers(model)
    first = greedy_search(start, [DropMarker()], FakeCost(), budget=5)
    then = relaxed_search(first.model, RULES, FakeCost(), alpha=1.1, budget=50)
    joined = continued_from(first, then)
    assert joined.substitutions == first.substitutions + then.substitutions
    assert joined.input_cost == first.input_cost == START_COST + 2
    assert joined.cost == CANCELLED_COST and joined.model is then.model
    assert joined.stats.expansions == first.stats.expansions + then.stats.expansions
    assert all(c.trace[:len(first.trace)] == first.trace for c in joined.kept)
    # nothing better found after greedy: greedy's graph, under greedy's name
    idle = relaxed_search(first.model, [DropMarker()], FakeCost(), alpha=1.1, budget=5)
    assert idle.returned == "input"
    assert continued_from(first, idle).returned == first.returned == "best"


def test_a_commuting_rule_is_also_applied_at_all_its_matches_in_one_step():
    model = _negations_model()
    start = _with_markers(model)
    result = greedy_search(start, [DropMarker()], FakeCost(), budget=1)
    assert result.substitutions == ["drop_marker(all 2 matches)"]
    assert result.cost == START_COST
    np.testing.assert_array_equal(_outputs(result), _outputs(model))
