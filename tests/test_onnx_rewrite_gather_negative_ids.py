"""gather_negative_ids: tf2onnx's lowering of Keras's ``SelectV2(ids < 0, ids + n, ids)``
before a Gather of an n-row constant goes, the ids go straight in (ONNX's Gather counts negative
indices from the end itself). Outputs compared exactly (tolerance 0), on ids covering
``[-n, n-1]``."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_graph_testing import BATCHES, assert_same_outputs, const, model, ops

from tfopt.optimizer.candidates.onnx.rewrites.base import eliminate_dead_nodes
from tfopt.optimizer.candidates.onnx.rewrites.gather_negative_ids import gather_negative_ids

ROWS, WIDTH, STEPS = 7, 4, 6


def embedding(added: int = ROWS, compare: str = "Less", threshold: float = 0.0,
              where: bool = False) -> onnx.ModelProto:
    """ids [batch, STEPS] int32 -> the select as tf2onnx writes it -> Gather(table[ROWS])."""
    if where:
        select = [helper.make_node("Where", ["negative", "wrapped", "ids"], ["index"])]
    else:
        select = [helper.make_node("Cast", ["negative"], ["taken"], to=TensorProto.INT32),
                  helper.make_node("Not", ["negative"], ["positive"]),
                  helper.make_node("Cast", ["positive"], ["kept"], to=TensorProto.INT32),
                  helper.make_node("Mul", ["ids", "kept"], ["from_ids"]),
                  helper.make_node("Mul", ["taken", "wrapped"], ["from_wrapped"]),
                  helper.make_node("Add", ["from_wrapped", "from_ids"], ["index"])]
    nodes = [helper.make_node("Add", ["ids", "n"], ["wrapped"]),
             helper.make_node("Cast", ["ids"], ["ids_float"], to=TensorProto.FLOAT),
             helper.make_node(compare, ["ids_float", "zero"], ["negative"]),
             *select,
             helper.make_node("Gather", ["table", "index"], ["rows"], axis=0)]
    table = np.random.default_rng(3).standard_normal((ROWS, WIDTH)).astype(np.float32)
    return model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT32,
                                                       ["batch", STEPS])], ["rows"],
                 [const("table", table), const("n", np.int32(added)),
                  const("zero", np.float32(threshold))])


def id_feeds():
    """Every id of [-n, n-1] appears, at each batch size."""
    rng = np.random.default_rng(0)
    return [{"ids": rng.integers(-ROWS, ROWS, (batch, STEPS)).astype(np.int32)}
            for batch in (*BATCHES, 40)]


@pytest.mark.parametrize("where", [False, True], ids=["tf2onnx arithmetic", "Where"])
def test_the_select_goes_and_the_gather_reads_the_ids(where):
    original = embedding(where=where)
    rewritten = gather_negative_ids(original)
    gather = next(n for n in rewritten.graph.node if n.op_type == "Gather")
    assert list(gather.input) == ["table", "ids"]
    assert ops(eliminate_dead_nodes(rewritten)) == {"Gather": 1}
    assert_same_outputs(original, rewritten, id_feeds())


@pytest.mark.parametrize("near_miss", [
    {"added": ROWS - 1},  # wraps to another row than Gather would
    {"added": ROWS + 1},
    {"compare": "LessOrEqual"},  # 0 would be wrapped to n, out of range
    {"compare": "Greater"},
    {"threshold": 1.0},  # ids < 1
], ids=["adds n-1", "adds n+1", "<= 0", "> 0", "< 1"])
def test_a_select_that_is_not_the_negative_index_fix_up_is_left_alone(near_miss):
    original = embedding(**near_miss)
    assert gather_negative_ids(original) is original
