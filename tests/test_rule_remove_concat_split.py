"""remove_concat_split: a concat undone by a split, or a split undone by a concat, goes away.

Tolerance: 1e-5, although the rewrite only rewires edges: no arithmetic changes, so the outputs
are expected to be bit-identical (the bound is there to state it, not because it is needed).
"""

import numpy as np
from graph_testing import assert_same_outputs, build_graph, context, op_counts, tf

from tfopt.optimizer.search.rules import rule_class

RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((2, 5, 5, 3)).astype(np.float32)
RULE = rule_class("remove_concat_split")()


def _weights(*shape):
    return tf.constant(RNG.uniform(-1, 1, shape).astype(np.float32))


def _x():
    return tf.compat.v1.placeholder(tf.float32, [None, 5, 5, 3], name="x")


def _inception_block(split_sizes=(2, 4, 3), extra_reader=False):
    """Three parallel branches concatenated, as an Inception block does, then split back into
    the branches (what merging the branches' convs leaves behind), each branch going on, and the
    block's output concatenated again."""
    def body():
        x = _x()
        one = tf.nn.conv2d(x, _weights(1, 1, 3, 2), 1, "SAME", name="branch_1x1")
        three = tf.nn.conv2d(x, _weights(3, 3, 3, 4), 1, "SAME", name="branch_3x3")
        pooled = tf.nn.avg_pool2d(x, 3, 1, "SAME")
        pool = tf.nn.conv2d(pooled, _weights(1, 1, 3, 3), 1, "SAME", name="branch_pool")
        joined = tf.concat([one, three, pool], axis=-1, name="joined")
        pieces = tf.split(joined, list(split_sizes), axis=3, name="pieces")
        tf.concat([tf.nn.relu(p) for p in pieces], axis=3, name="y")
        if extra_reader:
            tf.identity(joined, name="z")
    return build_graph(body)


def _split_then_concat(order=(0, 1, 2), axis=3, relu=True):
    def body():
        x = _x()
        pieces = tf.split(tf.nn.relu(x, name="r"), 3, axis=3, name="pieces")
        joined = tf.concat([pieces[k] for k in order], axis=axis, name="joined")
        if relu:
            tf.nn.relu(joined, name="y")
    return build_graph(body)


def test_remove_concat_split_finds_the_concat_split_pair_of_an_inception_block():
    graph = _inception_block()
    found = RULE.matches(graph, context(["x"], ["y"]))
    assert [(m.nodes, m.detail["kind"]) for m in found] == [
        (("joined", "pieces"), "concat_split")]
    assert found == RULE.matches(graph, context(["x"], ["y"]))


def test_remove_concat_split_lets_each_branch_read_its_own_output():
    graph = _inception_block()
    ctx = context(["x"], ["y"])
    [match] = RULE.matches(graph, ctx)
    removed = RULE.apply(graph, match, ctx)

    assert op_counts(graph)["ConcatV2"] - op_counts(removed)["ConcatV2"] == 1
    assert op_counts(graph)["SplitV"] == 1 and op_counts(removed)["SplitV"] == 0
    relus = [n for n in removed.node if n.op == "Relu"]
    assert sorted(n.input[0] for n in relus) == ["branch_1x1", "branch_3x3", "branch_pool"]
    assert_same_outputs(graph, removed, {"x": IMAGE}, ["y"], atol=1e-5)
    assert RULE.matches(removed, ctx) == []


def test_remove_concat_split_handles_a_split_into_equal_pieces():
    def body():
        x = _x()
        halves = [tf.nn.conv2d(x, _weights(1, 1, 3, 2), 1, "SAME", name=f"conv{i}")
                  for i in range(2)]
        pieces = tf.split(tf.concat(halves, axis=3, name="joined"), 2, axis=3, name="pieces")
        tf.subtract(pieces[0], pieces[1], name="y")
    graph = build_graph(body)
    ctx = context(["x"], ["y"])
    [match] = RULE.matches(graph, ctx)
    removed = RULE.apply(graph, match, ctx)
    assert op_counts(graph)["Split"] == 1 and op_counts(removed)["Split"] == 0
    assert list({n.name: n for n in removed.node}["y"].input) == ["conv0", "conv1"]
    assert_same_outputs(graph, removed, {"x": IMAGE}, ["y"], atol=1e-5)


def test_remove_concat_split_makes_the_concat_of_all_split_pieces_read_the_split_input():
    graph = _split_then_concat()
    ctx = context(["x"], ["y"])
    [match] = RULE.matches(graph, ctx)
    assert match.nodes == ("pieces", "joined") and match.detail["kind"] == "split_concat"
    removed = RULE.apply(graph, match, ctx)

    assert op_counts(removed)["ConcatV2"] == 0 and op_counts(removed)["Split"] == 0
    assert {n.name: list(n.input) for n in removed.node}["y"] == ["r"]
    assert_same_outputs(graph, removed, {"x": IMAGE}, ["y"], atol=1e-5)


def test_remove_concat_split_keeps_a_boundary_concat_as_an_identity_of_the_split_input():
    graph = _split_then_concat(relu=False)
    ctx = context(["x"], ["joined"])
    removed = RULE.apply(graph, RULE.matches(graph, ctx)[0], ctx)

    joined = {n.name: n for n in removed.node}["joined"]
    assert joined.op == "Identity" and list(joined.input) == ["r"]
    assert op_counts(removed)["Split"] == 0
    assert_same_outputs(graph, removed, {"x": IMAGE}, ["joined"], atol=1e-5)


def test_remove_concat_split_leaves_near_misses_alone():
    ctx = context(["x"], ["y", "z"])
    # Split back at other sizes: piece 0 would not be branch 0.
    assert RULE.matches(_inception_block(split_sizes=(4, 2, 3)), ctx) == []
    # The concatenated tensor is read elsewhere too, so it is still needed.
    assert RULE.matches(_inception_block(extra_reader=True), ctx) == []
    # Pieces out of order, or joined along another axis, are not the split input.
    assert RULE.matches(_split_then_concat(order=(1, 0, 2)), ctx) == []
    assert RULE.matches(_split_then_concat(axis=2), ctx) == []
    # A concat that is an output may not be removed.
    assert RULE.matches(_inception_block(), context(["x"], ["y", "joined"])) == []


def test_remove_concat_split_does_not_modify_its_input():
    for graph, ctx in ((_inception_block(), context(["x"], ["y"])),
                       (_split_then_concat(relu=False), context(["x"], ["joined"]))):
        before = graph.SerializeToString(deterministic=True)
        RULE.apply(graph, RULE.matches(graph, ctx)[0], ctx)
        assert graph.SerializeToString(deterministic=True) == before
