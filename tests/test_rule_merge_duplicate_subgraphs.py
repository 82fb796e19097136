"""merge_duplicate_subgraphs: one node of a duplicate pair is dropped per match.

Tolerance: 1e-5, although merging only rewires edges to a node computing the same values: the
outputs are expected to be bit-identical.
"""

import numpy as np
from graph_testing import assert_same_outputs, build_graph, context, op_counts, tf

from tfopt.optimizer.search.rules import rule_class

RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((2, 5, 5, 3)).astype(np.float32)
WEIGHTS = RNG.uniform(-1, 1, (3, 3, 3, 4)).astype(np.float32)
RULE = rule_class("merge_duplicate_subgraphs")()
CTX = context(["x"], ["y"])


def _two_copies_of_a_branch():
    """The same conv + relu built twice from two Consts of equal value, then added."""
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 5, 5, 3], name="x")
        branches = [tf.nn.relu(tf.nn.conv2d(x, tf.constant(WEIGHTS, name=f"w{i}"), 1, "SAME",
                                            name=f"conv{i}"), name=f"relu{i}")
                    for i in range(2)]
        tf.add(*branches, name="y")
    return build_graph(body)


def _merge_all(graph, ctx):
    steps = []
    while found := RULE.matches(graph, ctx):
        steps.append(found[0].nodes)
        graph = RULE.apply(graph, found[0], ctx)
    return graph, steps


def test_merge_duplicate_subgraphs_finds_equal_constants_first():
    graph = _two_copies_of_a_branch()
    found = RULE.matches(graph, CTX)
    # The convs read different Const nodes, so only the Consts are duplicates yet.
    assert [m.nodes for m in found] == [("w0", "w1")]
    assert found == RULE.matches(graph, CTX)


def test_merge_duplicate_subgraphs_merges_a_whole_branch_one_node_per_match():
    graph = _two_copies_of_a_branch()
    merged, steps = _merge_all(graph, CTX)

    assert steps == [("w0", "w1"), ("conv0", "conv1"), ("relu0", "relu1")]
    assert op_counts(graph)["Conv2D"] == 2 and op_counts(merged)["Conv2D"] == 1
    assert len(graph.node) - len(merged.node) == 3
    assert list({n.name: n for n in merged.node}["y"].input) == ["relu0", "relu0"]
    assert_same_outputs(graph, merged, {"x": IMAGE}, ["y"], atol=1e-5)


def test_merge_duplicate_subgraphs_keeps_the_boundary_copy():
    graph = _two_copies_of_a_branch()
    ctx = context(["x"], ["y", "relu1"])
    merged, steps = _merge_all(graph, ctx)
    assert steps[-1] == ("relu1", "relu0")
    assert "relu1" in {n.name for n in merged.node}
    assert_same_outputs(graph, merged, {"x": IMAGE}, ["y", "relu1"], atol=1e-5)


def test_merge_duplicate_subgraphs_leaves_near_misses_alone():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 5, 5, 3], name="x")
        tf.compat.v1.placeholder(tf.float32, [None, 5, 5, 3], name="x2")
        # Two random draws are two values; equal ops with different attrs compute different things.
        noise = [tf.random.uniform([3], seed=1, name=f"noise{i}") for i in range(2)]
        tf.nn.conv2d(x, tf.constant(WEIGHTS), 1, "SAME", name="same")
        tf.nn.conv2d(x, tf.constant(WEIGHTS * 2), 1, "SAME", name="scaled")
        tf.nn.conv2d(x, tf.constant(WEIGHTS), 1, "VALID", name="valid")
        tf.add(noise[0], noise[1], name="y")
    graph = build_graph(body)
    found = RULE.matches(graph, CTX)
    # Equal Consts (weights, the random ops' shapes) may merge; none of these nodes may.
    merged_nodes = {n for m in found for n in m.nodes}
    assert merged_nodes.isdisjoint({"x", "x2", "noise0", "noise1", "same", "scaled", "valid"})
    # Two boundary nodes are never merged into one another.
    assert RULE.matches(_two_copies_of_a_branch(), context(["x"], ["y", "w0", "w1"])) == []


def test_merge_duplicate_subgraphs_does_not_modify_its_input():
    graph = _two_copies_of_a_branch()
    before = graph.SerializeToString(deterministic=True)
    RULE.apply(graph, RULE.matches(graph, CTX)[0], CTX)
    assert graph.SerializeToString(deterministic=True) == before
