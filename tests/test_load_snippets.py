"""The ``tfopt.load`` snippet of every format takes the model's names as string literals.

A signature name, an input key or an output key comes from the model, which may be hostile.
A reviewer pastes the snippet a version is tagged with: no name may run as code in it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo

HOSTILE = "x\"]'); __import__('os').system('touch pwned') #\n"


def hostile_signature() -> SignatureInfo:
    return SignatureInfo(
        name=HOSTILE,
        inputs=(TensorSpecInfo(key=f"in{HOSTILE}", tensor_name="in:0", dtype="float32", shape=(None, 4)),),
        outputs=(TensorSpecInfo(key=f"out{HOSTILE}", tensor_name="out:0",
                                    dtype="float32", shape=(None, 2)),))


def snippets() -> dict[str, str]:
    from tfopt.optimizer.candidates.build import savedmodel_load_instructions
    from tfopt.optimizer.candidates.litert.manifest import load_snippet as litert
    from tfopt.optimizer.candidates.onnx.convert import load_snippet as onnx
    from tfopt.optimizer.candidates.openvino.convert import load_snippet as openvino

    signature = hostile_signature()
    return {"savedmodel": savedmodel_load_instructions(signature.name),
            "tflite": litert("model.tflite", signature),
            "onnx": onnx("model.onnx", signature),
            "openvino": openvino("model.xml", signature, "f32")}


def names_run(tree: ast.AST) -> set[str]:
    """Every name and attribute the code refers to (what could run), string constants aside."""
    return ({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)})


@pytest.mark.parametrize("fmt", ["savedmodel", "tflite", "onnx", "openvino"])
def test_every_formats_snippet_holds_hostile_names_as_string_literals(fmt):
    snippet = snippets()[fmt]
    tree = ast.parse(snippet)
    assert not {"__import__", "system"} & names_run(tree), snippet
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    wanted = {"savedmodel": {HOSTILE},  # the signature, by name
              "tflite": {HOSTILE, f"in{HOSTILE}"},  # the outputs in a comment, escaped
              "onnx": {f"in{HOSTILE}", f"out{HOSTILE}"},
              "openvino": {f"in{HOSTILE}", f"out{HOSTILE}"}}[fmt]
    assert wanted <= literals, snippet


def test_the_savedmodel_snippet_run_by_a_reviewer_asks_for_the_signature_and_runs_nothing(
        tmp_path, monkeypatch):
    asked = []

    class Loaded:
        signatures = type("Signatures", (), {"__getitem__": lambda _, k: asked.append(k)})()

    class SavedModel:
        @staticmethod
        def load(path):
            return Loaded()

    monkeypatch.chdir(tmp_path)
    # run as a reviewer runs it, with TensorFlow's loader stood in for: nothing else may run
    exec(  # noqa: S102
        snippets()["savedmodel"], {"tf": type("tf", (), {"saved_model": SavedModel}),
                                   "path": "saved_model"})
    assert asked == [HOSTILE]
    assert not (Path(tmp_path) / "pwned").exists()


def test_a_publish_tags_a_savedmodel_version_with_the_quoted_signature(tmp_path):
    """The fallback of a record that carries no snippet quotes the config's signature too."""
    from tfopt.components.config.pipeline_config import config_from_mapping
    from tfopt.components.pipeline.artifacts import CandidateModel, GateOutput, PulledModel
    from tfopt.components.publishing.publication import Publication

    config = config_from_mapping({"source": str(tmp_path), "workdir": str(tmp_path / "w"),
                                  "signature": HOSTILE})
    pub = Publication(
        config=config, pulled=PulledModel(uri="u", path="p", digest="d"), models=(),
        registered=None, signature=hostile_signature(),
        gate=GateOutput(promote=False, chosen=None, chosen_path=None, summary="",
                        verdict_path=""),
        decision={}, result=None, run_key="k", dag_run_id=None, run_context={})
    model = CandidateModel(label="optimized", path="p", kind="optimized", digest="d")
    tree = ast.parse(pub.load_instructions(model))
    assert not {"__import__", "system"} & names_run(tree)
    assert HOSTILE in {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}


@pytest.mark.parametrize("fmt", ["savedmodel", "tflite", "onnx", "openvino"])
def test_a_tuned_snippet_loads_with_the_tuned_thread_count_and_still_parses(fmt):
    from tfopt.optimizer.runtime_tuning import TunedRuntimeSettings
    from tfopt.optimizer.runtime_tuning.grid import ThreadSetting

    per_model = fmt != "savedmodel"
    tuned = TunedRuntimeSettings(
        model=f"model.{fmt}", intra_op_threads=None if per_model else 3,
        inter_op_threads=None if per_model else 2, num_threads=3 if per_model else None,
        recommended_batch_size=None, batch_reason="", throughput_target=None,
        latency_slo_ms=None, reference=ThreadSetting(4, 1), thread_probes=(), batch_curve=(),
        batches_not_measured=(), available_cpus=4, cpu_quota=None, cpu_model="test")
    snippet = tuned.load_snippet(snippets()[fmt])
    tree = ast.parse(snippet)
    assert "sched_getaffinity" not in snippet
    calls = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    if per_model:
        assert any("3" in c and ("num_threads" in c or "INFERENCE_NUM_THREADS" in c)
                   for c in calls) or "intra_op_num_threads = 3" in snippet, snippet
    else:
        assert "tf.config.threading.set_intra_op_parallelism_threads(3)" in calls
        assert "tf.config.threading.set_inter_op_parallelism_threads(2)" in calls
        assert len(snippet.splitlines()) == 1  # the one-line load stays one line
