import numpy as np
import pytest
from control_flow_graphs import (
    LOOP_FORMS,
    assert_control_flow_kept,
    cond_graph,
    feeds_for_both_branches,
    while_graph,
)
from graph_testing import (
    assert_idempotent,
    assert_same_outputs,
    build_graph,
    context,
    op_counts,
    run_graph,
    tf,
)

from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.base import TransformConfigError
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

# Removing a pass-through only rewires edges: the outputs must be the same up to float noise.
ATOL = 1e-6


def remove_identity_and_check_numerics():
    return make_transform("remove_nodes", op=["Identity", "CheckNumerics"])


def _pass_through_chain():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        a = tf.identity(x, name="a")
        b = tf.debugging.check_numerics(a * 2.0, "must be finite", name="b")
        c = tf.identity(tf.identity(b, name="c1"), name="c2")
        tf.nn.relu(c, name="y")
    return build_graph(body)


def _feeds():
    return {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}


def _by_name(graph_def):
    return {n.name: n for n in graph_def.node}


def test_remove_nodes_bypasses_listed_ops_and_rewires_consumers_to_their_input():
    graph = _pass_through_chain()
    removed = remove_identity_and_check_numerics()(graph, context(["x"], ["y"]))

    counts = op_counts(removed)
    assert counts["Identity"] == 0 and counts["CheckNumerics"] == 0
    nodes = _by_name(removed)
    assert list(nodes["y"].input) == ["mul"]
    assert nodes["mul"].input[0] == "x"


def test_remove_nodes_keeps_the_output_index_of_the_bypassed_input():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [4, 6], name="x")
        _, second = tf.split(x, 2, axis=1, name="split")
        tf.nn.relu(tf.identity(second, name="pass"), name="y")
    graph = build_graph(body)
    removed = make_transform("remove_nodes", op="Identity")(graph, context(["x"], ["y"]))

    assert list(_by_name(removed)["y"].input) == ["split:1"]
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(4, 6) - 10}
    assert_same_outputs(graph, removed, feeds, ["y"], atol=ATOL)


def test_remove_nodes_keeps_boundary_nodes_and_nodes_that_carry_control_edges():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        gate = tf.identity(x, name="gate")  # the source of a control edge
        with tf.control_dependencies([gate]):
            held = tf.identity(x, name="held")  # has a control input
        tf.identity(held * 2.0, name="y")  # the graph's output
    graph = build_graph(body)
    removed = make_transform("remove_nodes", op="Identity")(graph, context(["x"], ["y"]))

    assert {"held", "gate", "y"} <= set(_by_name(removed))
    assert "^gate" in _by_name(removed)["held"].input


def test_remove_nodes_keeps_pivots_and_identities_next_to_control_flow_ops():
    lowered = cond_graph()
    removed = remove_identity_and_check_numerics()(
        lowered.graph_def, context(lowered.input_nodes, lowered.output_nodes))
    by_name = {**_by_name(lowered.graph_def)}
    kept = _by_name(removed)

    pivots = [n for n in lowered.graph_def.node if n.op == "Identity"
              and by_name[n.input[0].split(":")[0]].op == "Switch"]
    feeding_merge = [i.split(":")[0] for n in lowered.graph_def.node if n.op == "Merge"
                     for i in n.input]
    assert pivots and feeding_merge
    assert all(p.name in kept for p in pivots)
    assert all(name in kept for name in feeding_merge)
    assert op_counts(removed)["Identity"] < op_counts(lowered.graph_def)["Identity"]


def test_remove_nodes_keeps_outputs_equal():
    graph = _pass_through_chain()
    removed = remove_identity_and_check_numerics()(graph, context(["x"], ["y"]))
    assert_same_outputs(graph, removed, _feeds(), ["y"], atol=ATOL)


@pytest.mark.parametrize("build", [cond_graph, while_graph], ids=["cond", "while"])
def test_remove_nodes_keeps_lowered_control_flow_correct(build):
    lowered = build()
    removed = remove_identity_and_check_numerics()(
        lowered.graph_def, context(lowered.input_nodes, lowered.output_nodes))

    assert len(removed.node) < len(lowered.graph_def.node)
    for feeds in feeds_for_both_branches():
        assert_same_outputs(lowered.graph_def, removed, feeds, list(lowered.outputs), atol=ATOL)


def test_remove_nodes_redirects_colocation_on_a_removed_node():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        passed = tf.identity(x, name="passed")
        with tf.compat.v1.get_default_graph().colocate_with(passed):
            tf.math.exp(passed, name="y")
    graph = build_graph(body)
    removed = make_transform("remove_nodes", op="Identity")(graph, context(["x"], ["y"]))

    assert "passed" not in _by_name(removed)
    assert list(_by_name(removed)["y"].attr["_class"].list.s) == [b"loc:@x"]
    run_graph(removed, {"x": np.ones(2, np.float32)}, ["y"])  # imports: no dangling colocation


def test_remove_nodes_twice_changes_nothing():
    assert_idempotent(remove_identity_and_check_numerics(), _pass_through_chain(),
                      context(["x"], ["y"]))
    lowered = cond_graph()
    assert_idempotent(remove_identity_and_check_numerics(), lowered.graph_def,
                      context(lowered.input_nodes, lowered.output_nodes))


def test_remove_nodes_needs_an_op():
    with pytest.raises(TransformConfigError, match="at least one 'op'"):
        make_transform("remove_nodes")


@pytest.mark.parametrize(**LOOP_FORMS)
def test_remove_nodes_keeps_a_frozen_lstm_correct(model_dir, lowered):
    model = freeze(model_dir("keras_lstm"), lower_control_flow=lowered)
    removed, _ = run_transforms(model, [remove_identity_and_check_numerics()])

    assert len(removed.graph_def.node) < len(model.graph_def.node)
    assert_control_flow_kept(model.graph_def, removed.graph_def)
    report = compare(model, removed)
    assert report.max_abs_diff <= ATOL, report.summary()


def test_remove_nodes_drops_identities_from_a_frozen_cnn(model_dir):
    model = freeze(model_dir("keras_cnn"))
    removed, _ = run_transforms(model, [remove_identity_and_check_numerics()])

    assert op_counts(removed.graph_def)["Identity"] < op_counts(model.graph_def)["Identity"]
    report = compare(model, removed)
    assert report.max_abs_diff <= ATOL, report.summary()
