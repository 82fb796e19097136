"""Waiting for the process to go idle between blocks: ONNX Runtime's spinning workers (native
threads, running on after a call) are waited for, a quiet process is not, the wait ends at its
cap, and where /proc cannot say nothing is waited for.

The spinning thread is a real ONNX Runtime pool: a Python thread cannot stand in for it, since
it only runs while it holds the GIL, never while the waiting thread looks."""

import numpy as np
import pytest

from tfopt.optimizer.benchmark import idle
from tfopt.optimizer.benchmark.idle import running_threads, wait_for_idle


def spinning_session():
    """A 2-thread ONNX Runtime session of one 256x256 MatMul, spinning on (its default)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    weight = helper.make_tensor("w", TensorProto.FLOAT, [256, 256],
                                np.ones(256 * 256, np.float32))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    x = np.ones((256, 256), np.float32)
    return lambda: session.run(None, {"x": x})


@pytest.fixture(scope="module")
def call_spinning():
    call = spinning_session()
    call()
    wait_for_idle(max_seconds=1.0)
    return call


def test_a_quiet_process_is_idle_at_the_first_look():
    waited, went_idle = wait_for_idle()
    assert went_idle
    assert waited < 0.05


def test_after_a_spinning_pools_calls_the_wait_lasts_until_its_worker_stops(call_spinning):
    for _ in range(3):
        call_spinning()
    assert running_threads() >= 1  # the worker spins on after the call
    waited, went_idle = wait_for_idle(max_seconds=2.0)
    assert went_idle
    assert waited > 0.002
    assert running_threads() == 0


def test_a_worker_still_running_at_the_cap_ends_the_wait_as_not_idle(call_spinning):
    call_spinning()
    waited, went_idle = wait_for_idle(max_seconds=0.001)
    assert not went_idle
    assert 0.001 <= waited < 0.02
    wait_for_idle(max_seconds=2.0)


def test_where_proc_cannot_say_nothing_is_waited_for(monkeypatch, tmp_path):
    monkeypatch.setattr(idle, "TASKS", str(tmp_path / "no-proc"))
    assert running_threads() is None
    assert wait_for_idle() == (pytest.approx(0, abs=0.01), True)
