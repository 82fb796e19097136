import numpy as np
from graph_testing import (
    assert_idempotent,
    assert_same_outputs,
    build_graph,
    context,
    op_counts,
    tf,
)

from tfopt.optimizer.transforms.registry import make_transform


def _graph_with_a_dead_branch():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        unused = tf.compat.v1.placeholder(tf.float32, [None, 3], name="unused_input")
        y = tf.nn.relu(x * 2.0, name="y")
        tf.math.exp(x, name="dead_exp")  # nobody reads it
        tf.identity(unused, name="dead_identity")
        del y
    return build_graph(body)


def test_strip_unused_nodes_drops_what_the_outputs_do_not_need():
    graph = _graph_with_a_dead_branch()
    ctx = context(inputs=["x", "unused_input"], outputs=["y"])

    stripped = make_transform("strip_unused_nodes")(graph, ctx)

    names = {n.name for n in stripped.node}
    assert "dead_exp" not in names and "dead_identity" not in names
    assert {"x", "unused_input", "y"} <= names
    assert op_counts(stripped)["Exp"] == 0


def test_strip_unused_nodes_keeps_outputs_equal():
    graph = _graph_with_a_dead_branch()
    ctx = context(inputs=["x", "unused_input"], outputs=["y"])
    stripped = make_transform("strip_unused_nodes")(graph, ctx)
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}
    assert_same_outputs(graph, stripped, feeds, ["y"], atol=0)


def test_strip_unused_nodes_keeps_control_dependencies_of_outputs():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        check = tf.debugging.check_numerics(x, "x must be finite", name="check")
        with tf.control_dependencies([check]):
            tf.identity(x, name="y")
    graph = build_graph(body)
    stripped = make_transform("strip_unused_nodes")(graph, context(["x"], ["y"]))
    assert "check" in {n.name for n in stripped.node}


def test_strip_unused_nodes_twice_changes_nothing():
    assert_idempotent(make_transform("strip_unused_nodes"), _graph_with_a_dead_branch(),
                      context(["x", "unused_input"], ["y"]))


def test_strip_unused_nodes_does_not_mutate_its_input():
    graph = _graph_with_a_dead_branch()
    snapshot = graph.SerializeToString(deterministic=True)
    make_transform("strip_unused_nodes")(graph, context(["x", "unused_input"], ["y"]))
    assert graph.SerializeToString(deterministic=True) == snapshot
