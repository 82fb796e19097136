import numpy as np
import pytest
from control_flow_graphs import (
    LOOP_FORMS,
    assert_control_flow_kept,
    cond_graph,
    feeds_for_both_branches,
    freeze_function,
    while_graph,
)
from graph_testing import (
    assert_idempotent,
    assert_same_outputs,
    build_graph,
    context,
    run_graph,
    tf,
)

from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare

# Dropping control edges changes no value: the outputs must match up to float noise.
ATOL = 1e-6


def _asserted_graph():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        check = tf.raw_ops.Assert(condition=tf.reduce_all(x > 0), data=[x], name="positive")
        with tf.control_dependencies([check]):
            checked = tf.identity(x, name="checked")
        tf.nn.relu(checked * 2.0, name="y")
    return build_graph(body)


def _control_inputs(graph_def) -> list[str]:
    return [i for n in graph_def.node for i in n.input if i.startswith("^")]


def _positive_feeds():
    return {"x": np.abs(np.random.default_rng(0).standard_normal((4, 3))).astype(np.float32) + 0.1}


def test_remove_control_dependencies_strips_the_assert_edge():
    graph = _asserted_graph()
    assert "^positive" in {n.name: n for n in graph.node}["checked"].input

    stripped = make_transform("remove_control_dependencies")(graph, context(["x"], ["y"]))

    assert _control_inputs(stripped) == []
    assert "positive" in {n.name for n in stripped.node}  # left for strip_unused_nodes


def test_remove_control_dependencies_means_the_assert_no_longer_runs():
    graph = _asserted_graph()
    stripped = make_transform("remove_control_dependencies")(graph, context(["x"], ["y"]))
    negative = {"x": -np.ones((2, 3), np.float32)}

    with pytest.raises(tf.errors.InvalidArgumentError):
        run_graph(graph, negative, ["y"])
    np.testing.assert_array_equal(run_graph(stripped, negative, ["y"])[0], np.zeros((2, 3)))


def test_remove_control_dependencies_keeps_outputs_equal():
    graph = _asserted_graph()
    stripped = make_transform("remove_control_dependencies")(graph, context(["x"], ["y"]))
    assert_same_outputs(graph, stripped, _positive_feeds(), ["y"], atol=ATOL)


@pytest.mark.parametrize("build", [cond_graph, while_graph], ids=["cond", "while"])
def test_remove_control_dependencies_keeps_what_lowered_control_flow_needs(build):
    lowered = build()
    assert _control_inputs(lowered.graph_def), "the lowered graph should use control inputs"

    stripped = make_transform("remove_control_dependencies")(
        lowered.graph_def, context(lowered.input_nodes, lowered.output_nodes))

    # Every control edge in these graphs is inside a branch or a loop: each one stays.
    assert sorted(_control_inputs(stripped)) == sorted(_control_inputs(lowered.graph_def))
    for feeds in feeds_for_both_branches():
        assert_same_outputs(lowered.graph_def, stripped, feeds, list(lowered.outputs), atol=ATOL)


def _guarded_cond_graph():
    """An Assert (itself a cond once lowered) gates the input of another cond."""
    def fn(x):
        check = tf.debugging.Assert(tf.reduce_all(tf.math.is_finite(x)), [x])
        with tf.control_dependencies([check]):
            x = tf.identity(x, name="checked")
        return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.reduce_sum(x), lambda: tf.constant(7.0))
    return freeze_function(fn, tf.TensorSpec([None, 3], tf.float32, name="x"))


def test_remove_control_dependencies_strips_edges_next_to_a_cond_but_not_in_it():
    lowered = _guarded_cond_graph()
    ctx = context(lowered.input_nodes, lowered.output_nodes)
    stripped = make_transform("remove_control_dependencies")(lowered.graph_def, ctx)
    before = {n.name: n for n in lowered.graph_def.node}
    after = {n.name: n for n in stripped.node}

    assert any(i.startswith("^") for i in before["checked"].input)
    assert not any(i.startswith("^") for i in after["checked"].input)
    held_consts = [n.name for n in lowered.graph_def.node
                   if n.op == "Const" and any(i.startswith("^") for i in n.input)]
    assert held_consts
    assert all(list(after[name].input) == list(before[name].input) for name in held_consts)
    for feeds in feeds_for_both_branches():
        assert_same_outputs(lowered.graph_def, stripped, feeds, list(lowered.outputs), atol=ATOL)


def test_remove_control_dependencies_lets_a_cond_graph_run_past_its_failed_assert():
    lowered = _guarded_cond_graph()
    stripped = make_transform("remove_control_dependencies")(
        lowered.graph_def, context(lowered.input_nodes, lowered.output_nodes))
    not_finite = {"x": np.full((1, 3), np.nan, np.float32)}

    with pytest.raises(tf.errors.InvalidArgumentError):
        run_graph(lowered.graph_def, not_finite, list(lowered.outputs))
    assert run_graph(stripped, not_finite, list(lowered.outputs))[0] == pytest.approx(7.0)


def test_remove_control_dependencies_twice_changes_nothing():
    assert_idempotent(make_transform("remove_control_dependencies"), _asserted_graph(),
                      context(["x"], ["y"]))


@pytest.mark.parametrize(**LOOP_FORMS)
def test_remove_control_dependencies_keeps_a_frozen_lstm_correct(model_dir, lowered):
    model = freeze(model_dir("keras_lstm"), lower_control_flow=lowered)
    stripped, _ = run_transforms(model, [make_transform("remove_control_dependencies")])

    kept = _control_inputs(stripped.graph_def)
    assert len(kept) < len(_control_inputs(model.graph_def))
    # A lowered loop's frames need some of its control edges; a functional loop keeps its own
    # inside its body, which the transform leaves as it is.
    assert (len(kept) > 0) == lowered
    assert_control_flow_kept(model.graph_def, stripped.graph_def)
    report = compare(model, stripped)
    assert report.max_abs_diff <= ATOL, report.summary()


def test_remove_control_dependencies_clears_a_frozen_cnn(model_dir):
    model = freeze(model_dir("keras_cnn"))
    stripped, _ = run_transforms(model, [make_transform("remove_control_dependencies")])

    assert _control_inputs(model.graph_def) and not _control_inputs(stripped.graph_def)
    report = compare(model, stripped)
    assert report.max_abs_diff <= ATOL, report.summary()
