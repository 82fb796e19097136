"""The native backend: a GTT recipe run by TensorFlow's own C++ Graph Transform Tool."""

import numpy as np
import pytest
from control_flow_graphs import assert_control_flow_kept
from graph_testing import assert_same_outputs, build_graph, op_counts, tf

from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.optimize import native_gtt
from tfopt.optimizer.optimize.gtt_syntax import RecipeSyntaxError, parse_transforms
from tfopt.optimizer.transforms.pipeline import TransformFailed
from tfopt.optimizer.verify.equivalence import compare


def _graph_with_a_constant_chain():
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        scale = tf.constant([1.0, 2.0, 3.0], name="scale")
        offset = tf.math.add(tf.math.multiply(scale, 2.0, name="doubled"), 1.0, name="offset")
        tf.math.add(x, offset, name="y")
    return build_graph(body)


def test_the_binding_ships_with_this_tensorflow():
    assert native_gtt.is_available()


def test_native_fold_constants_folds_a_constant_chain():
    graph = _graph_with_a_constant_chain()
    assert op_counts(graph)["Mul"] == 1

    folded = native_gtt.transform_graph(graph, ["x"], ["y"], "fold_constants")

    assert op_counts(folded)["Mul"] == 0
    assert op_counts(folded)["AddV2"] == 1  # only x + folded offset is left
    assert {"x", "y"} <= {n.name for n in folded.node}


def test_native_fold_constants_keeps_the_outputs():
    graph = _graph_with_a_constant_chain()
    folded = native_gtt.transform_graph(graph, ["x"], ["y"], "fold_constants")
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}
    assert_same_outputs(graph, folded, feeds, ["y"], atol=1e-6)


def test_native_transform_does_not_mutate_its_input():
    graph = _graph_with_a_constant_chain()
    snapshot = graph.SerializeToString(deterministic=True)
    native_gtt.transform_graph(graph, ["x"], ["y"], "fold_constants strip_unused_nodes")
    assert graph.SerializeToString(deterministic=True) == snapshot


def test_an_unknown_native_transform_is_one_line_naming_it_and_gtts_transforms():
    with pytest.raises(native_gtt.NativeGttError) as caught:
        native_gtt.transform_graph(_graph_with_a_constant_chain(), ["x"], ["y"],
                                   "fold_constants not_a_gtt_transform")
    message = str(caught.value)
    assert "Transform 'not_a_gtt_transform' not recognized" in message
    assert "fold_old_batch_norms" in message and "\n" not in message
    assert caught.value.exit_code == 2


def test_a_gtt_parameter_error_comes_back_as_one_line():
    with pytest.raises(native_gtt.NativeGttError,
                       match="ignore_errors should be true or false, found maybe"):
        native_gtt.transform_graph(_graph_with_a_constant_chain(), ["x"], ["y"],
                                   "fold_constants(ignore_errors=maybe)")


def test_a_recipe_gtt_would_silently_truncate_is_a_syntax_error():
    # GTT's own parser accepts an unclosed '(' and drops that transform without a word.
    with pytest.raises(RecipeSyntaxError, match="column 16: expected '\\)'"):
        native_gtt.transform_graph(_graph_with_a_constant_chain(), ["x"], ["y"],
                                   "fold_constants(")


def test_a_missing_binding_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(native_gtt, "BINDING_MODULE", "tensorflow.python.util._no_such_binding")
    assert not native_gtt.is_available()
    with pytest.raises(native_gtt.NativeGttUnavailable, match="use the python backend"):
        native_gtt.transform_graph(_graph_with_a_constant_chain(), ["x"], ["y"],
                                   "fold_constants")


@pytest.fixture(scope="module")
def frozen_cnn(model_dir):
    return freeze(model_dir("keras_cnn"))


def test_a_native_recipe_on_a_keras_cnn_keeps_signature_and_outputs(frozen_cnn):
    recipe = "strip_unused_nodes fold_constants(ignore_errors=true) fold_batch_norms"

    optimized = native_gtt.run_native_recipe(frozen_cnn, recipe)

    assert optimized.signature == frozen_cnn.signature
    assert optimized.history[-3:] == ("native:strip_unused_nodes",
                                      "native:fold_constants(ignore_errors=true)",
                                      "native:fold_batch_norms")
    # fold_constants collapses the batch-norm arithmetic (Rsqrt of the variance etc.).
    assert op_counts(frozen_cnn.graph_def)["Rsqrt"] > 0
    assert op_counts(optimized.graph_def)["Rsqrt"] == 0
    # Folding reorders float32 arithmetic; 1e-4 is the optimize command's default tolerance.
    assert compare(frozen_cnn, optimized).max_abs_diff <= 1e-4


def test_a_native_recipe_keeps_an_lstm_s_loops_and_their_library(model_dir):
    """GTT rewrites the main graph and hands the function library back untouched."""
    frozen = freeze(model_dir("keras_lstm"))
    optimized = native_gtt.run_native_recipe(
        frozen, "strip_unused_nodes remove_nodes(op=Identity) fold_constants(ignore_errors=true)")

    assert_control_flow_kept(frozen.graph_def, optimized.graph_def)
    assert len(optimized.graph_def.node) < len(frozen.graph_def.node)
    assert compare(frozen, optimized).max_abs_diff <= 1e-5


def test_native_steps_are_traced_one_by_one(frozen_cnn):
    specs = parse_transforms("strip_unused_nodes fold_constants(ignore_errors=true)")
    _, trace = native_gtt.run_native_transforms(frozen_cnn, specs)
    assert [step.transform for step in trace] == [
        "native:strip_unused_nodes", "native:fold_constants(ignore_errors=true)"]
    assert trace[1].nodes_after < trace[1].nodes_before


def test_a_signature_node_lost_by_gtt_is_refused(frozen_cnn, monkeypatch):
    real = native_gtt.transform_graph

    def dropping_the_output(graph_def, inputs, outputs, transforms):
        result = real(graph_def, inputs, outputs, transforms)
        kept = [n for n in result.node if n.name not in outputs]
        del result.node[:]
        result.node.extend(kept)
        return result

    monkeypatch.setattr(native_gtt, "transform_graph", dropping_the_output)
    with pytest.raises(TransformFailed, match="removed or renamed signature node"):
        native_gtt.run_native_recipe(frozen_cnn, "strip_unused_nodes")
