"""Malformed ``saved_model.pb``: a one-line TfoptError (exit 2), never a crash or a blown worker.

Variants: random bytes, a real model's pb cut at many offsets, absurd sizes (sparse files over
and under the limit), length prefixes claiming gigabytes, recursion bombs in binary and text
form, and memory bombs (a few MB of empty repeated messages that protobuf would turn into GBs).
A memory bomb is parsed only in a child interpreter with capped address space; this process's own
peak memory is checked not to move.
"""

import os
import random
import resource
import shutil
import signal
import sys
import threading
from pathlib import Path

import pytest
from cli_testing import assert_clean_failure, run_tfopt

from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.pipeline.step_runner import run_step
from tfopt.optimizer.errors import CorruptSavedModelError, OversizedSavedModelError, TfoptError
from tfopt.optimizer.files import bounded_parse
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, MIB, ScanPolicy
from tfopt.optimizer.model.savedmodel import describe, read_saved_model_proto

GIB = 1 << 30


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _nested_attr(depth: int) -> bytes:
    """AttrValue.func -> NameAttrList.attr[k] -> AttrValue.func ..., ``depth`` times."""
    inner = b""
    for _ in range(depth):
        inner = _field(10, _field(1, b"f") + _field(2, _field(1, b"k") + _field(2, inner)))
    return inner


def _graph_with(node: bytes) -> bytes:
    """SavedModel.meta_graphs[0].graph_def.node[0] = ``node``."""
    return _field(2, _field(2, _field(1, node)))


def _model(tmp_path, name, data: bytes | None = None, sparse: int | None = None,
           text: str | None = None) -> Path:
    root = tmp_path / name
    root.mkdir()
    if text is not None:
        (root / "saved_model.pbtxt").write_text(text)
    elif sparse is not None:
        with open(root / "saved_model.pb", "wb") as f:
            f.truncate(sparse)
    else:
        (root / "saved_model.pb").write_bytes(data)
    return root


def _one_line_error(path, policy=DEFAULT_POLICY, expected=TfoptError) -> str:
    with pytest.raises(expected) as caught:
        read_saved_model_proto(path, policy)
    message = str(caught.value)
    assert message and "\n" not in message, message
    assert caught.value.exit_code == 2
    return message


@pytest.fixture(scope="module")
def real_pb(model_dir) -> bytes:
    return (model_dir("keras_cnn") / "saved_model.pb").read_bytes()


SEEDS = [0, 1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", [1, 64, 4096])
def test_random_bytes_are_a_corrupt_model(tmp_path, seed, size):
    data = random.Random(seed * 7919 + size).randbytes(size)
    message = _one_line_error(_model(tmp_path, "random", data), expected=CorruptSavedModelError)
    assert "corrupt saved_model.pb in" in message


# Fractions of the file, and a few absolute offsets near the start and the end.
CUTS = [0, 1, 2, 3, 16, 100, 0.1, 0.25, 0.5, 0.75, 0.9, -100, -1]


@pytest.mark.parametrize("cut", CUTS)
def test_a_real_model_cut_anywhere_is_a_corrupt_model(tmp_path, real_pb, cut):
    offset = int(len(real_pb) * cut) if isinstance(cut, float) else cut % len(real_pb)
    message = _one_line_error(_model(tmp_path, "cut", real_pb[:offset]),
                              expected=CorruptSavedModelError)
    assert "corrupt saved_model.pb" in message


@pytest.mark.parametrize("length", [2**31 - 1, 2**32 + 5, 2**62])
@pytest.mark.parametrize("where", ["meta_graphs", "node"])
def test_a_length_prefix_claiming_gigabytes_is_a_corrupt_model(tmp_path, length, where):
    claim = _varint(length) + b"\x00" * 16
    data = b"\x12" + claim if where == "meta_graphs" else _field(2, _field(2, b"\x0a" + claim))
    assert "corrupt saved_model.pb" in _one_line_error(_model(tmp_path, "prefix", data))


@pytest.mark.parametrize("depth", [50, 1000, 5000])
def test_a_recursion_bomb_is_refused_by_depth(tmp_path, depth):
    node = _field(1, b"n") + _field(2, b"Const") + _field(5, _field(1, b"v") +
                                                        _field(2, _nested_attr(depth)))
    message = _one_line_error(_model(tmp_path, "deep", _graph_with(node)),
                              expected=CorruptSavedModelError)
    assert "MaxDepth" in message or "Wire format" in message


@pytest.mark.parametrize("depth", [200, 20_000])
def test_a_recursion_bomb_in_text_format_is_a_corrupt_model(tmp_path, depth):
    text = "meta_graphs { graph_def { node { attr { key: 'v' value { " + \
        "func { name: 'f' attr { key: 'k' value { " * depth + "}}}" * depth + "}}}}}"
    message = _one_line_error(_model(tmp_path, "deep-text", text=text),
                              expected=CorruptSavedModelError)
    assert "corrupt saved_model.pbtxt" in message


@pytest.mark.parametrize("text", ["meta_graphs {", "not a proto at all", "\x00\x01\x02",
                                  "meta_graphs { graph_def { node { op: 12 } } }"])
def test_garbage_text_format_is_a_corrupt_model(tmp_path, text):
    assert "corrupt saved_model.pbtxt" in _one_line_error(_model(tmp_path, "garbage", text=text))


@pytest.mark.parametrize("size", [2 * GIB + 1, 3 * GIB, 64 * GIB])
def test_a_sparse_file_over_the_limit_is_refused_unread(tmp_path, size):
    message = _one_line_error(_model(tmp_path, "huge", sparse=size),
                              expected=OversizedSavedModelError)
    assert "over the limit of 2.0 GiB" in message and "security.max_saved_model_mb" in message


def test_a_sparse_file_under_the_limit_is_parsed_in_a_child_and_refused(tmp_path):
    message = _one_line_error(_model(tmp_path, "zeros", sparse=64 * MIB),
                              expected=CorruptSavedModelError)
    assert "Wire format" in message


# Two bytes each: an empty MetaGraphDef, an empty NodeDef, an empty library FunctionDef.
BOMBS = {
    "empty_meta_graphs": b"\x12\x00" * (12 * MIB),
    "empty_nodes": _field(2, _field(2, b"\x0a\x00" * (12 * MIB))),
    "empty_functions": _field(2, _field(2, _field(2, b"\x0a\x00" * (12 * MIB)))),
}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_a_memory_bomb_is_refused_without_growing_this_process(tmp_path, bomb):
    path = _model(tmp_path, bomb, BOMBS[bomb])
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    message = _one_line_error(path, expected=OversizedSavedModelError)
    assert "memory bomb" in message
    growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    assert growth_mib < 100  # parsed here, these would take 1-3 GB


def test_the_size_limit_is_the_policys(tmp_path, real_pb):
    path = _model(tmp_path, "m", real_pb)
    tight = ScanPolicy(max_pb_bytes=len(real_pb) - 1)
    assert "over the limit" in _one_line_error(path, tight, OversizedSavedModelError)
    assert read_saved_model_proto(path, ScanPolicy(max_pb_bytes=len(real_pb))).meta_graphs


def test_a_parse_that_outlives_its_time_is_killed_and_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(bounded_parse, "TIMEOUT_SECONDS", 0.0)
    message = _one_line_error(_model(tmp_path, "slow", sparse=8 * MIB))
    assert "took longer than" in message


def test_a_parser_that_dies_is_a_corrupt_model_not_a_dead_worker(tmp_path, monkeypatch):
    monkeypatch.setattr(bounded_parse, "_child_command", lambda *args: [
        sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    message = _one_line_error(_model(tmp_path, "crash", sparse=8 * MIB),
                              expected=CorruptSavedModelError)
    assert f"signal {int(signal.SIGSEGV)}" in message


def test_a_message_that_parses_but_means_nothing_is_described_or_refused(tmp_path):
    nonsense = {
        "no_meta_graph": _varint(1 << 3) + _varint(1),
        "unknown_dtype_signature": _field(2, _field(5, _field(1, b"serving_default") + _field(
            2, _field(1, _field(1, b"x") + _field(2, _field(1, b"x:0") + b"\x10\xff\x01"))))),
        "unknown_fields_only": _field(2, _field(99, b"whatever")),
    }
    for name, data in nonsense.items():
        path = _model(tmp_path, name, data)
        try:
            describe(path)
        except TfoptError as exc:
            assert "\n" not in str(exc)


def test_pull_applies_the_configured_size_limit(tmp_path, model_dir):
    source = tmp_path / "source"
    shutil.copytree(model_dir("tf1_saved_model"), source)
    with open(source / "saved_model.pb", "r+b") as f:
        f.truncate(2 * MIB)  # sparse padding: a 2 MiB file, whatever it holds
    config = config_from_mapping({"source": str(source), "workdir": str(tmp_path / "work"),
                                  "security": {"max_saved_model_mb": 1}})
    with pytest.raises(OversizedSavedModelError, match=f"{source} is 2.0 MiB, over the limit "
                                                       "of 1.0 MiB"):
        run_step("pull", config)
    assert not (tmp_path / "work" / "sources").exists() or not any(
        (tmp_path / "work" / "sources").iterdir())


CLI_CASES = {
    "huge": ({"sparse": 3 * GIB}, "over the limit of 2.0 GiB"),
    "deep": ({"data": _graph_with(_field(5, _field(1, b"v") + _field(2, _nested_attr(1000))))},
             "MaxDepth"),
    "prefix": ({"data": b"\x12" + _varint(2**40)}, "corrupt saved_model.pb"),
    "random": ({"data": random.Random(9).randbytes(1000)}, "corrupt saved_model.pb"),
    "bomb": ({"data": BOMBS["empty_nodes"]}, "memory bomb"),
    "text": ({"text": "meta_graphs { graph_def {"}, "corrupt saved_model.pbtxt"),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_the_cli_main_reports_each_kind_on_one_line_with_exit_2(tmp_path, case, capsys):
    """``tfopt inspect`` through the CLI's own main(); the binary itself is run below."""
    from tfopt.components.cli import main

    kwargs, phrase = CLI_CASES[case]
    path = _model(tmp_path, case, **kwargs)
    assert main(["inspect", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfopt: error: "), lines
    assert phrase in lines[0] and str(path) in lines[0]


def test_the_tfopt_binary_refuses_a_memory_bomb_with_exit_2(tmp_path):
    path = _model(tmp_path, "bomb", BOMBS["empty_meta_graphs"])
    assert_clean_failure(run_tfopt("inspect", path), 2, "memory bomb", str(path))


def test_a_memory_bomb_is_refused_when_this_process_holds_freed_heap_the_child_could_reuse(
        tmp_path):
    # A long-lived worker's heap is full of freed, still-mapped memory; the forked child parses
    # in it without growing its address space, so the cap alone let this flood through.
    import numpy as np

    scattered = [np.empty(300, np.uint8) for _ in range(6_000_000)]
    pinned = scattered[::1000]  # keeps the freed chunks between them from going back
    del scattered
    path = _model(tmp_path, "empty_nodes", BOMBS["empty_nodes"])
    assert "memory bomb" in _one_line_error(path, expected=OversizedSavedModelError)
    assert len(pinned) == 6000


def test_the_child_is_a_fresh_interpreter_not_a_fork_of_a_threaded_process(tmp_path,
                                                                            monkeypatch):
    # Issue 15, 2c: forking a process that holds TensorFlow's threads (and their locks) is
    # unsafe; the parse runs in a new interpreter that imports protobuf, not TensorFlow.
    forks = []
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or pytest.fail("forked"))
    started = []
    real_command = bounded_parse._child_command
    monkeypatch.setattr(bounded_parse, "_child_command",
                        lambda *args: started.append(real_command(*args)) or started[-1])
    import tensorflow as tf

    busy = threading.Event()
    worker = threading.Thread(target=lambda: busy.wait(60), daemon=True)
    worker.start()  # a live thread beside TensorFlow's own pools
    assert tf.constant(1.0).numpy() == 1.0

    message = _one_line_error(_model(tmp_path, "zeros", sparse=8 * MIB),
                              expected=CorruptSavedModelError)
    busy.set()
    assert "Wire format" in message  # parsed (and refused) by the child
    assert forks == [] and started and started[0][:3] == [sys.executable, "-m",
                                                            "tfopt.optimizer.files.bounded_parse"]


def test_a_large_real_savedmodel_passes_the_child_and_parses_here(tmp_path, real_pb, monkeypatch):
    monkeypatch.setattr(bounded_parse, "IN_PROCESS_BYTES", 16)  # send this small one through it
    monkeypatch.setattr(bounded_parse, "_vetted", set())
    started = []
    real_command = bounded_parse._child_command
    monkeypatch.setattr(bounded_parse, "_child_command",
                        lambda *args: started.append(1) or real_command(*args))
    assert read_saved_model_proto(_model(tmp_path, "real", real_pb)).meta_graphs
    assert started == [1]
