"""The op cost model times each op key once and reuses it; its costs order graphs by size."""

import json
import math

import numpy as np
import pytest
from graph_testing import build_graph, tf

from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.search.cost import MeasuredCost, OpCostModel, rank_correlation


def _conv_graph(size, channels, name_prefix=""):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, size, size, channels], name="x")
        w = tf.constant(np.full((3, 3, channels, channels), 0.01, np.float32), name="w")
        y = tf.nn.conv2d(x, w, 1, "SAME", name=f"{name_prefix}conv")
        tf.nn.relu(y, name="out")
    return build_graph(body)


def _conv_model(size, channels):
    signature = SignatureInfo(
        name="serving_default",
        inputs=(TensorSpecInfo("x", "x:0", "float32", (None, size, size, channels)),),
        outputs=(TensorSpecInfo("out", "out:0", "float32", (None, size, size, channels)),))
    return FrozenModel(_conv_graph(size, channels), signature)


def test_an_op_is_timed_once_then_read_from_the_cache(tmp_path):
    model = OpCostModel(cache_path=tmp_path / "costs.json")
    graph = _conv_graph(16, 16)
    first = model.cost(graph)
    timed = model.timings
    assert first > 0 and timed == 2  # Conv2D and Relu; Placeholder and Const cost nothing
    assert model.cost(graph) == first and model.timings == timed


def test_a_renamed_copy_of_an_op_reuses_its_timing(tmp_path):
    model = OpCostModel(cache_path=tmp_path / "costs.json")
    model.cost(_conv_graph(16, 16))
    model.cost(_conv_graph(16, 16, name_prefix="other_"))
    assert model.timings == 2  # the key is op, shapes, dtypes and attrs, not the node name


def test_the_cache_file_is_reused_by_a_new_instance(tmp_path):
    path = tmp_path / "nested" / "costs.json"
    graph = _conv_graph(16, 16)
    first = OpCostModel(cache_path=path).cost(graph)
    data = json.loads(path.read_text())
    assert len(data["seconds"]) == 2 and all(v > 0 for v in data["seconds"].values())
    assert [p.name for p in path.parent.iterdir()] == ["costs.json"]  # no staging file left
    again = OpCostModel(cache_path=path)
    assert again.cost(graph) == first and again.timings == 0


def test_a_cache_from_another_machine_or_a_broken_file_is_not_used(tmp_path):
    path = tmp_path / "costs.json"
    graph = _conv_graph(8, 8)
    OpCostModel(cache_path=path).cost(graph)
    data = json.loads(path.read_text())
    data["machine"] = "some other cpu"
    path.write_text(json.dumps(data))
    other = OpCostModel(cache_path=path)
    other.cost(graph)
    assert other.timings == 2
    path.write_text("{not json")
    broken = OpCostModel(cache_path=path)
    broken.cost(graph)
    assert broken.timings == 2 and json.loads(path.read_text())["seconds"]


def test_a_bigger_convolution_costs_more(tmp_path):
    model = OpCostModel(cache_path=tmp_path / "costs.json")
    small, big = model.op_costs(_conv_graph(8, 8)), model.op_costs(_conv_graph(56, 64))
    assert big["conv"] > 10 * small["conv"]  # 3136 times the multiply-adds


def test_the_batch_size_fixes_unknown_dims(tmp_path):
    one = OpCostModel(cache_path=tmp_path / "costs.json", batch_size=1)
    many = OpCostModel(cache_path=tmp_path / "costs.json", batch_size=16)
    graph = _conv_graph(28, 32)
    assert many.op_costs(graph)["conv"] > 2 * one.op_costs(graph)["conv"]


def test_free_ops_and_ops_on_constants_cost_nothing(tmp_path):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        folded = tf.multiply(tf.constant(2.0), tf.constant(3.0), name="folded")
        tf.identity(tf.identity(x) * folded, name="out")
    model = OpCostModel(cache_path=tmp_path / "costs.json")
    costs = model.op_costs(build_graph(body))
    assert costs["folded"] == 0.0 and costs["x"] == 0.0 and costs["out"] == 0.0
    assert [n for n, c in costs.items() if c > 0] == ["mul"]


def test_an_op_that_cannot_be_timed_alone_gets_the_fallback_and_is_not_cached(tmp_path):
    def body():
        x = tf.compat.v1.placeholder(tf.float32, None, name="x")  # unknown rank
        tf.nn.relu(x, name="out")
    path = tmp_path / "costs.json"
    model = OpCostModel(cache_path=path, fallback_seconds=0.125)
    assert model.op_costs(build_graph(body))["out"] == 0.125
    assert model.timings == 0 and not path.exists()


def test_measured_cost_is_the_latency_of_the_whole_graph():
    small, big = _conv_model(8, 8), _conv_model(56, 64)
    small_cost = MeasuredCost(small, runs=5, warmup=1).cost(small.graph_def)
    big_cost = MeasuredCost(big, runs=5, warmup=1).cost(big.graph_def)
    assert 0 < small_cost < big_cost


def test_the_model_ranks_convolutions_of_very_different_sizes_as_measured(tmp_path):
    model = OpCostModel(cache_path=tmp_path / "costs.json")
    models = [_conv_model(28, c) for c in (4, 48, 160)]
    modelled = [model.cost(m.graph_def) for m in models]
    measured = [MeasuredCost(m, runs=9, warmup=2).cost(m.graph_def) for m in models]
    assert rank_correlation(modelled, measured) == pytest.approx(1.0)


def test_rank_correlation_is_one_for_the_same_order_and_minus_one_for_the_reverse():
    assert rank_correlation([1.0, 2.0, 3.0, 10.0], [0.1, 0.5, 0.6, 0.7]) == pytest.approx(1.0)
    assert rank_correlation([1.0, 2.0, 3.0, 10.0], [0.7, 0.6, 0.5, 0.1]) == pytest.approx(-1.0)


def test_rank_correlation_gives_ties_their_average_rank():
    # ranks (0.5, 0.5, 2) against (0, 1, 2): Pearson of the ranks is sqrt(3)/2.
    assert rank_correlation([1.0, 1.0, 5.0], [1.0, 2.0, 3.0]) == pytest.approx(math.sqrt(3) / 2)


def test_rank_correlation_of_a_constant_or_mismatched_list():
    assert math.isnan(rank_correlation([1.0, 1.0], [1.0, 2.0]))
    with pytest.raises(ValueError):
        rank_correlation([1.0, 2.0], [1.0])


def test_a_loop_is_costed_without_running_its_frame_ops_alone(tmp_path):
    # An Enter run outside its loop crashes the process; loop parts get the fallback instead.
    from control_flow_graphs import while_graph

    lowered = while_graph()
    model = OpCostModel(cache_path=tmp_path / "costs.json", fallback_seconds=0.5)
    ops = {n.name: n.op for n in lowered.graph_def.node}
    costs = model.op_costs(lowered.graph_def)
    frame_ops = [name for name, op in ops.items() if op in ("Enter", "Exit", "NextIteration",
                                                            "Merge", "Switch", "LoopCond")]
    assert frame_ops and all(costs[name] == 0.5 for name in frame_ops)
    # Shape inference loses the loop variables' shapes at the Merge, so the body's ops and the
    # Mul after the loop have unknown input shapes: they get the fallback too, untimed.
    assert costs["mul"] == 0.5 and model.timings == 0


def test_a_functional_loop_costs_what_its_unrolled_copies_cost(tmp_path):
    from control_flow_graphs import counted_loop_graph
    from graph_testing import context

    from tfopt.optimizer.transforms.registry import make_transform

    graph = counted_loop_graph(trips=6)
    unrolled = make_transform("unroll_static_loops")(
        graph.graph_def, context(graph.input_nodes, graph.output_nodes))
    model = OpCostModel(cache_path=tmp_path / "costs.json", fallback_seconds=0.5, runs=3,
                        warmup=1)
    costs = model.op_costs(graph.graph_def)
    [loop] = [n.name for n in graph.graph_def.node if n.op == "StatelessWhile"]
    copies = {name: seconds for name, seconds in model.op_costs(unrolled).items()
              if name.startswith(f"{loop}/unrolled/")}
    # Six trips' Mul and AddV2, timed (far below the fallback), and no loop machinery.
    assert costs[loop] == pytest.approx(sum(copies.values()))
    assert 0 < costs[loop] < 0.5


def test_a_data_dependent_loop_costs_the_fallback(tmp_path):
    from control_flow_graphs import input_bounded_loop_graph

    graph = input_bounded_loop_graph()
    model = OpCostModel(cache_path=tmp_path / "costs.json", fallback_seconds=0.5)
    [loop] = [n.name for n in graph.graph_def.node if n.op == "StatelessWhile"]
    assert model.op_costs(graph.graph_def)[loop] == 0.5
