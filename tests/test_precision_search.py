"""The precision search's core on measured-style tables, without TensorFlow or a runtime: the
greedy fallback follows sensitivity, the relaxed queue reaches through slower assignments what
greedy cannot, and what is returned was measured inside the budget."""

from __future__ import annotations

import itertools

import pytest

from tfopt.optimizer.search.precision.search import (
    Measured,
    greedy_fallback,
    relaxed_precision_search,
    search_precision,
    sensitivity_order,
)
from tfopt.optimizer.search.precision.table import INPUT, OUTPUT, PrecisionTable


def chain(names, boundary, int8, floats, quantized_alone, float_alone, int8_error):
    ends = (INPUT, *names, OUTPUT)
    return PrecisionTable(
        layers=tuple(names), int8_seconds=dict(zip(names, int8)),
        float_seconds=dict(zip(names, floats)),
        edges=tuple((a, b, boundary) for a, b in itertools.pairwise(ends)),
        quantized_alone=dict(zip(names, quantized_alone)),
        float_alone=dict(zip(names, float_alone)), int8_error=int8_error)


def costly_sensitive_layer():
    """L2 is the most sensitive layer and costly in float; L1 and L3 are cheap in float, and
    keeping both (not either alone) in float also meets a 0.012 budget."""
    return chain(["L1", "L2", "L3", "L4", "L5"], 0.1, [1, 1, 1, 1, 1], [1.2, 5, 1.2, 3, 3],
                 [0.004, 0.009, 0.004, 0.001, 0.001], [0.015, 0.010, 0.015, 0.018, 0.018],
                 int8_error=0.019)


def as_predicted(table):
    return lambda assignments: [Measured(table.latency(a), table.error(a)) for a in assignments]


def test_greedy_falls_back_in_the_order_of_measured_sensitivity():
    table = chain(["a", "b", "c", "d"], 0.0, [1] * 4, [2] * 4, [0.01, 0.03, 0.005, 0.02],
                  [0.05, 0.03, 0.06, 0.04], int8_error=0.06)
    assert sensitivity_order(table) == ["b", "d", "a", "c"]
    walk = greedy_fallback(table, max_error=0.0, keep=4)
    assert walk[0].float_layers == ("a", "b", "c", "d")
    steps = [step.move for step in walk[0].trace]
    assert steps == ["float b", "float d", "float a", "float c"]
    # stops at the first assignment inside the budget
    first = greedy_fallback(table, max_error=0.035, keep=1)
    assert [p.float_layers for p in first] == [("b",)]


def test_relaxed_reaches_through_a_slower_assignment_what_greedy_cannot():
    table = costly_sensitive_layer()
    greedy = search_precision(table, "greedy", 0.012, as_predicted(table))
    relaxed = search_precision(table, "relaxed", 0.012, as_predicted(table))
    assert greedy.float_layers == ("L2",)
    assert relaxed.float_layers == ("L1", "L3")
    assert relaxed.measured.seconds < greedy.measured.seconds
    trace = relaxed.chosen.trace
    assert [s.move for s in trace] == ["float L1", "float L3"]
    # the first step is slower than uniform int8 and outside the budget: greedy never takes it
    assert trace[0].predicted_seconds > table.latency(frozenset())
    assert trace[0].predicted_error > 0.012
    assert "L1" not in greedy_fallback(table, 0.012)[0].float_layers


def test_relaxed_with_alpha_1_and_one_expansion_cannot_leave_greedy():
    table = costly_sensitive_layer()
    proposals, stats = relaxed_precision_search(
        table, 0.012, alpha=1.0, budget=1, incumbent=greedy_fallback(table, 0.012)[0])
    assert stats.expansions == 1 and stats.stopped_by == "budget"
    assert proposals[0].float_layers == ("L2",)


def test_merging_float_islands_removes_their_boundaries():
    table = chain(["A", "B", "C"], 1.0, [1, 1, 1], [1.1, 1.5, 1.1], [0.01, 0.0, 0.01],
                  [0.01, 0.02, 0.01], int8_error=0.02)
    greedy = search_precision(table, "greedy", 0.005, as_predicted(table))
    relaxed = search_precision(table, "relaxed", 0.005, as_predicted(table))
    assert greedy.float_layers == ("A", "C")
    assert relaxed.float_layers == ("A", "B", "C")
    assert table.boundaries(frozenset(relaxed.float_layers)) == 0
    assert relaxed.measured.seconds < greedy.measured.seconds


@pytest.mark.parametrize("strategy", ["greedy", "relaxed"])
def test_an_assignment_measured_outside_the_budget_is_never_returned(strategy):
    table = costly_sensitive_layer()

    def measure(assignments):
        # the measurement disagrees with the prediction about the fastest proposal
        results = as_predicted(table)(assignments)
        fastest = min(range(len(results)), key=lambda i: results[i].seconds)
        results[fastest] = Measured(results[fastest].seconds, 0.05)
        return results

    result = search_precision(table, strategy, 0.012, measure)
    assert result.measured is not None and result.measured.error <= 0.012
    assert any(not t.within_budget for t in result.tried)
    assert all(t.measured_error <= 0.012 or t.float_layers != result.float_layers
               for t in result.tried)


def test_nothing_is_returned_when_nothing_measures_inside_the_budget():
    table = costly_sensitive_layer()
    result = search_precision(table, "relaxed", 0.012,
                              lambda a: [Measured(1.0, 0.5) for _ in a])
    assert result.chosen is None and result.tried


def test_a_table_missing_a_layer_is_refused():
    with pytest.raises(ValueError, match="int8_seconds"):
        PrecisionTable(("a",), {}, {"a": 1.0}, (), {"a": 0.0}, {"a": 0.0}, 0.0)
