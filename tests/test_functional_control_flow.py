"""Functional control flow in a frozen graph: lowering marks, the library's bookkeeping, and
graphs with rewritten loop bodies loading beside the originals."""

import logging

import pytest
from control_flow_graphs import counted_loop_graph
from graph_testing import build_graph, tf

from tfopt.optimizer.graph.functional_control_flow import (
    LOWERING_ATTR,
    functional_nodes,
    lower_at_load,
    prune_unreachable_functions,
    reachable_functions,
    rename_changed_functions,
)
from tfopt.optimizer.graph.validate import InvalidGraphError, validate_graph
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.transforms.registry import make_transform
from tfopt.optimizer.verify.equivalence import compare


def _loop_graph():
    graph_def = tf.compat.v1.GraphDef()
    graph_def.CopyFrom(counted_loop_graph(trips=3).graph_def)
    return graph_def


def test_lower_at_load_marks_every_loop_for_the_runtime_to_lower():
    graph_def = _loop_graph()
    [loop] = functional_nodes(graph_def)
    loop.attr[LOWERING_ATTR].b = False  # as convert_variables_to_constants_v2 leaves it
    assert lower_at_load(graph_def) == 1
    assert loop.attr[LOWERING_ATTR].b and lower_at_load(graph_def) == 0


def test_a_call_to_a_function_the_library_lacks_is_an_invalid_graph():
    graph_def = _loop_graph()
    [loop] = functional_nodes(graph_def)
    loop.attr["body"].func.name = "no_such_body"
    with pytest.raises(InvalidGraphError, match="calls missing function 'no_such_body'"):
        validate_graph(graph_def)


def test_functions_nothing_calls_are_pruned_and_called_ones_kept():
    graph_def = _loop_graph()
    called = reachable_functions(graph_def)
    assert len(called) == 2  # the loop's cond and body
    unused = graph_def.library.function.add()
    unused.CopyFrom(graph_def.library.function[0])
    unused.signature.name = "unused"
    assert prune_unreachable_functions(graph_def) == ["unused"]
    assert {f.signature.name for f in graph_def.library.function} == called


def test_a_rewritten_body_gets_a_new_name_and_its_callers_follow():
    before = _loop_graph()
    after = tf.compat.v1.GraphDef()
    after.CopyFrom(before)
    [loop] = functional_nodes(after)
    old = loop.attr["body"].func.name
    next(f for f in after.library.function if f.signature.name == old).attr["note"].s = b"new"
    renamed = rename_changed_functions(before, after)
    assert list(renamed) == [old] and loop.attr["body"].func.name == renamed[old] != old
    assert renamed[old] in reachable_functions(after)
    assert rename_changed_functions(before, before) == {}
    validate_graph(after)


def test_a_graph_whose_loop_bodies_grappler_rewrote_runs_beside_the_original(model_dir):
    """One process holds one function per name: without the rename, loading the rewritten
    graph after the original fails ("Attempting to add a duplicate function ...")."""
    frozen = freeze(model_dir("keras_lstm"))
    optimized, _ = run_transforms(frozen, [make_transform("grappler")])
    assert reachable_functions(optimized.graph_def) != reachable_functions(frozen.graph_def)
    assert compare(frozen, optimized, batches=1, batch_size=2).max_abs_diff < 1e-5


def test_a_graph_without_functions_has_nothing_to_rename():
    graph_def = build_graph(lambda: tf.identity(tf.compat.v1.placeholder(tf.float32), name="y"))
    assert rename_changed_functions(graph_def, graph_def) == {} and not functional_nodes(graph_def)


def test_a_transform_of_the_main_graph_only_warns_that_it_leaves_the_loops(caplog):
    from graph_testing import context

    graph = counted_loop_graph(trips=3)
    ctx = context(graph.input_nodes, graph.output_nodes)
    with caplog.at_level(logging.WARNING, logger="tfopt.optimizer.transforms"):
        folded = make_transform("fold_constants")(graph.graph_def, ctx)
        make_transform("unroll_static_loops")(graph.graph_def, ctx)
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith("fold_constants: leaves 1 StatelessWhile node(s)")
    assert folded.library == graph.graph_def.library
