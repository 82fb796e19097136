"""remove_identity_like: ops that return their input unchanged are bypassed, one per match.

Tolerance: 1e-5, although every bypassed op returns its input exactly (x * 1 and x + 0 are exact
in IEEE arithmetic, up to the sign of a zero): the outputs are expected to be bit-identical.
"""

import numpy as np
from control_flow_graphs import cond_graph, feeds_for_both_branches
from graph_testing import assert_same_outputs, build_graph, context, op_counts, tf

from tfopt.optimizer.graph.control_flow import nodes_under_control_flow
from tfopt.optimizer.search.rules import rule_class

RNG = np.random.default_rng(0)
ROWS = RNG.standard_normal((3, 4)).astype(np.float32)
RULE = rule_class("remove_identity_like")()
CTX = context(["x"], ["y"])
IDENTITY_LIKE = ["id", "snapshot", "stop", "reshape", "cast", "transpose", "times_one",
                 "plus_zero"]


def _chain_of_identity_likes():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        h = tf.identity(tf.nn.relu(x), name="id")
        h = tf.raw_ops.Snapshot(input=h, name="snapshot")
        h = tf.stop_gradient(h, name="stop")
        h = tf.reshape(h, [-1, 4], name="reshape")
        h = tf.raw_ops.Cast(x=h, DstT=tf.float32, name="cast")
        h = tf.transpose(h, [0, 1], name="transpose")
        h = tf.multiply(h, tf.ones([4]), name="times_one")
        h = tf.add(tf.zeros([1, 4]), h, name="plus_zero")
        tf.nn.relu(h, name="y")
    return build_graph(body)


def _near_misses():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        r = tf.nn.relu(x, name="r")
        outs = [
            tf.multiply(r, tf.ones([2, 4]), name="times_ones_that_broadcast"),
            tf.multiply(r, tf.fill([4], 2.0), name="times_two"),
            tf.add(r, tf.fill([4], 1e-30), name="plus_tiny"),
            tf.reshape(r, [-1, 2, 2], name="reshape_other"),
            tf.transpose(r, [1, 0], name="transpose_swap"),
            tf.raw_ops.Cast(x=r, DstT=tf.float64, name="cast_other"),
        ]
        with tf.control_dependencies([x]):
            outs.append(tf.identity(r, name="id_with_control_input"))
        outs.append(tf.identity(r, name="id_output"))
        tf.identity(outs[0], name="y")
    return build_graph(body)


def test_remove_identity_like_finds_every_kind_in_graph_order():
    graph = _chain_of_identity_likes()
    found = RULE.matches(graph, CTX)
    assert [m.nodes[0] for m in found] == IDENTITY_LIKE
    assert found == RULE.matches(graph, CTX)


def test_remove_identity_like_bypasses_one_op_per_match_and_keeps_the_outputs():
    graph = _chain_of_identity_likes()
    times_one = next(m for m in RULE.matches(graph, CTX) if m.nodes == ("times_one",))
    once = RULE.apply(graph, times_one, CTX)
    assert op_counts(graph)["Mul"] - op_counts(once)["Mul"] == 1
    assert len(graph.node) - len(once.node) == 2  # the Mul and its Const of ones
    assert list({n.name: n for n in once.node}["plus_zero"].input)[1] == "transpose"
    assert_same_outputs(graph, once, {"x": ROWS}, ["y"], atol=1e-5)

    bypassed = graph
    while found := RULE.matches(bypassed, CTX):
        bypassed = RULE.apply(bypassed, found[0], CTX)
    assert {n.name for n in bypassed.node}.isdisjoint(IDENTITY_LIKE)
    assert sorted(n.op for n in bypassed.node) == ["Placeholder", "Relu", "Relu"]
    assert_same_outputs(graph, bypassed, {"x": ROWS}, ["y"], atol=1e-5)


def test_remove_identity_like_leaves_near_misses_alone():
    graph = _near_misses()
    assert RULE.matches(graph, context(["x"], ["y", "id_output"])) == []
    # Without its output role, the last Identity is an ordinary one.
    assert [m.nodes for m in RULE.matches(graph, CTX)] == [("id_output",)]


def test_remove_identity_like_leaves_identities_inside_control_flow():
    lowered = cond_graph()
    ctx = context(lowered.input_nodes, lowered.output_nodes)
    inside = nodes_under_control_flow(lowered.graph_def)
    assert any(n.op == "Identity" and n.name in inside for n in lowered.graph_def.node)

    graph, applied = lowered.graph_def, []
    while found := RULE.matches(graph, ctx):
        assert found[0].nodes[0] not in inside
        applied.append(found[0].nodes[0])
        graph = RULE.apply(graph, found[0], ctx)
    assert applied  # identities outside the cond still go
    for feeds in feeds_for_both_branches():
        assert_same_outputs(lowered.graph_def, graph, feeds, list(lowered.outputs), atol=1e-5)


def test_remove_identity_like_does_not_modify_its_input():
    graph = _chain_of_identity_likes()
    before = graph.SerializeToString(deterministic=True)
    for match in RULE.matches(graph, CTX):
        RULE.apply(graph, match, CTX)
    assert graph.SerializeToString(deterministic=True) == before
