"""unroll_static_loops as a substitution rule: one match per unrollable loop, an exact rewrite,
and a search whose node cap leaves room for it."""

import numpy as np
from control_flow_graphs import counted_loop_graph, input_bounded_loop_graph
from graph_testing import assert_same_outputs, context, op_counts

from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.search.rules import rule_class
from tfopt.optimizer.search.search import relaxed_search

RULE = rule_class("unroll_static_loops")()


def _feeds(seed=0):
    return {"x:0": np.random.default_rng(seed).normal(size=(4, 2, 3)).astype(np.float32)}


def test_each_loop_with_a_constant_trip_count_is_one_match():
    graph = counted_loop_graph(trips=4)
    [match] = RULE.matches(graph.graph_def, context(graph.input_nodes, graph.output_nodes))
    assert match.detail["trips"] == 4
    assert op_counts(graph.graph_def)["StatelessWhile"] == 1


def test_a_data_dependent_loop_is_no_match():
    graph = input_bounded_loop_graph()
    assert RULE.matches(graph.graph_def, context(graph.input_nodes, graph.output_nodes)) == []


def test_apply_unrolls_exactly_and_leaves_its_input_as_it_was():
    graph = counted_loop_graph(trips=4)
    ctx = context(graph.input_nodes, graph.output_nodes)
    before = graph.graph_def.SerializeToString()
    [match] = RULE.matches(graph.graph_def, ctx)
    unrolled = RULE.apply(graph.graph_def, match, ctx)

    assert graph.graph_def.SerializeToString() == before
    assert "StatelessWhile" not in op_counts(unrolled) and op_counts(unrolled)["Mul"] == 4
    assert_same_outputs(graph.graph_def, unrolled, _feeds(), list(graph.outputs), atol=0)


class NodeCountCost:
    """A stand-in cost for the search: a loop costs its trips' worth of nodes plus the
    per-trip overhead a loop has and straight-line ops do not."""

    name = "node-count"

    def cost(self, graph_def) -> float:
        loops = sum(n.op == "StatelessWhile" for n in graph_def.node)
        return len(graph_def.node) + 1000 * loops


def test_the_search_can_keep_an_unrolled_graph_larger_than_twice_its_input():
    graph = counted_loop_graph(trips=12)
    spec = TensorSpecInfo("x", graph.inputs[0], "float32", (12, None, 3))
    outputs = tuple(TensorSpecInfo(f"out_{i}", name, "float32", None)
                    for i, name in enumerate(graph.outputs))
    model = FrozenModel(graph.graph_def, SignatureInfo("serving_default", (spec,), outputs))
    assert RULE.growth(graph.graph_def, context(graph.input_nodes, graph.output_nodes)) > \
        2 * len(graph.graph_def.node)

    result = relaxed_search(model, [RULE], NodeCountCost(), alpha=1.0, budget=3)

    assert [step.substitution.split("(")[0] for step in result.trace] == ["unroll_static_loops"]
    assert len(result.model.graph_def.node) > 2 * len(graph.graph_def.node)
    assert result.stats.oversized == 0
