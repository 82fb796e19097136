"""onnx_mixed_int8 on a model trained here that uniform int8 breaks (wine, features normalized
inside the model: tests/precision_models.py): the measured sensitivity names the normalization,
the search keeps it in float and lands inside the budget, and the candidate says which layers
it kept in float. Small budgets; the model is 1024 wide, where int8 matrix products pay
(at 64 wide every layer is faster in float in ONNX Runtime, and the search keeps them all)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from precision_models import searched_candidate, train_model

from tfopt.optimizer.inputs.calibration import choose_calibration, synthetic
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.search.precision.candidates import mixed_candidate
from tfopt.optimizer.search.precision.search import sensitivity_order
from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings
from tfopt.optimizer.verify.evaluation import load_labelled_data, top1_accuracy

BUDGET = 0.01


@pytest.fixture(scope="module")
def wine(tmp_path_factory):
    model = train_model("wine", tmp_path_factory.mktemp("wine"))
    signature = get_signature(model.saved_model, "serving_default")
    return model, signature, load_labelled_data(model.eval_data, signature, "top1"), \
        choose_calibration(signature, 50, calibration_data=str(model.calibration_data))


def search(wine, tmp_path_factory, mode, budget=BUDGET):
    return searched_candidate(wine[0], tmp_path_factory.mktemp(mode), mode, budget,
                              tmp_path_factory.getbasetemp() / "precision_costs.json")


@pytest.fixture(scope="module")
def relaxed(wine, tmp_path_factory):
    return search(wine, tmp_path_factory, "relaxed")


@pytest.fixture(scope="module")
def greedy(wine, tmp_path_factory):
    return search(wine, tmp_path_factory, "greedy")


def normalization(table) -> str:
    return next(n for n in table.layers if "normalize" in n)


def test_uniform_int8_breaks_the_budget_and_the_normalization_is_why(relaxed):
    table = relaxed.table
    assert relaxed.uniform_int8_error > BUDGET
    norm = normalization(table)
    assert table.quantized_alone[norm] > BUDGET  # quantizing it alone breaks the budget
    assert table.float_alone[norm] <= BUDGET  # keeping it alone in float is enough
    # every layer has both costs; a cost is a timed difference floored at 0 (litert_runtime), so a
    # layer cheaper than the timing noise may measure exactly 0
    assert all(table.int8_seconds[n] >= 0 and table.float_seconds[n] >= 0 for n in table.layers)


def test_the_mixed_candidate_is_inside_the_budget_and_lists_its_float_layers(relaxed, wine):
    model, _, eval_data, _ = wine
    candidate = relaxed.candidate
    assert candidate is not None and candidate.label == "onnx_mixed_int8"
    assert normalization(relaxed.table) in candidate.float_layers
    assert set(candidate.float_layers) < set(relaxed.table.layers)  # not all float
    float_accuracy = top1_accuracy(load_runner(model.saved_model), eval_data.x, eval_data.y)
    runner = load_runner(candidate.path)
    assert top1_accuracy(runner, eval_data.x, eval_data.y) >= float_accuracy - BUDGET
    sidecar = json.loads((candidate.artifact_dir / "model.onnx.json").read_text())
    assert sidecar["flavour"] == "mixed_int8"
    assert sidecar["converter"]["float_nodes"] == list(candidate.float_layers)
    # every assignment the search measured is in the trace, with both figures
    tried = relaxed.result.tried
    assert tried and all(t.measured_seconds > 0 and t.predicted_seconds > 0 for t in tried)
    assert relaxed.result.measured.error <= BUDGET


def test_greedy_falls_back_the_most_sensitive_measured_layer_first(greedy):
    table = greedy.table
    first = sensitivity_order(table)[0]
    assert first == normalization(table)
    assert greedy.result.chosen.trace[0].move == f"float {first}"
    assert greedy.candidate.float_layers == (first,)


def test_auto_leaves_the_search_off_where_uniform_int8_passes(wine, tmp_path_factory):
    outcome = search(wine, tmp_path_factory, "auto", budget=1.0)
    assert outcome.strategy == "off" and outcome.candidate is None
    assert "inside the budget" in outcome.reason


def test_auto_without_real_data_does_not_search(wine, tmp_path):
    model, signature, _, _ = wine
    outcome = mixed_candidate(model.saved_model, tmp_path, PrecisionSearchSettings(),
                                   BUDGET, signature="serving_default",
                                   calibration=synthetic(signature, 10))
    assert outcome.strategy == "off" and "no labelled or calibration data" in outcome.reason
    assert not list(tmp_path.iterdir())  # nothing converted


def test_the_float_reference_of_the_table_is_the_source_model(relaxed, wine):
    """The error meter's float model is the ONNX conversion of the source: its top-1 is the
    SavedModel's on every held-out row."""
    model, _, eval_data, _ = wine
    reference = load_runner(relaxed.candidate.path.replace(
        "onnx_mixed_int8/model.onnx", "onnx_mixed_int8_search/prepared.onnx"), format="onnx")
    stock = load_runner(model.saved_model)
    key = stock.signature.inputs[0].key
    ours = reference({key: eval_data.x})
    theirs = stock({key: eval_data.x})
    assert np.array_equal(next(iter(ours.values())).argmax(-1),
                          next(iter(theirs.values())).argmax(-1))


@pytest.mark.slow
def test_tfopt_optimize_searches_by_default_where_uniform_int8_breaks_the_budget(wine, tmp_path):
    """No --precision-search flag: auto sees onnx_static_int8 outside the budget and searches;
    the mixed candidate is benchmarked and gated with the others, its float layers in its row
    and the search's trace beside the chosen model."""
    from cli_testing import run_tfopt

    model = wine[0]
    dst = tmp_path / "out"
    done = run_tfopt("optimize", model.saved_model, dst, "--targets", "onnx", "--eval-data",
                     model.eval_data, "--accuracy-budget", str(BUDGET), "--seconds", "1",
                     timeout=900)
    assert done.returncode == 0, done.stderr
    assert "precision    relaxed: onnx_mixed_int8 keeps" in done.stdout
    rows = {r["label"]: r for r in json.loads((dst / "candidates.json").read_text())
            ["candidates"]}
    assert rows["onnx_static_int8"]["verdict"] == "rejected"
    mixed = rows["onnx_mixed_int8"]
    assert mixed["verdict"] in ("chosen", "passed") and mixed["accuracy_drop"] <= BUDGET
    assert any("normalize" in layer for layer in mixed["float_layers"])
    trace = json.loads((dst / "precision_search.json").read_text())["onnx_mixed_int8"]
    assert trace["strategy"] == "relaxed" and trace["float_layers"] == mixed["float_layers"]
    assert trace["result"]["tried"] and trace["table"]["layers"]


def test_litert_mixed_int8_denylists_the_normalization_and_stays_inside_the_budget(
        wine, tmp_path_factory):
    model, _, eval_data, _ = wine
    outcome = searched_candidate(model, tmp_path_factory.mktemp("litert"), "relaxed",
                                 target="litert")
    candidate = outcome.candidate
    assert outcome.uniform_int8_error > BUDGET
    assert candidate is not None and candidate.label == "litert_mixed_int8", outcome.reason
    assert any("normalize" in layer for layer in candidate.float_layers)
    float_accuracy = top1_accuracy(load_runner(model.saved_model), eval_data.x, eval_data.y)
    assert top1_accuracy(load_runner(candidate.path), eval_data.x,
                         eval_data.y) >= float_accuracy - BUDGET
    sidecar = json.loads((candidate.artifact_dir / "model.tflite.json").read_text())
    assert sidecar["flavour"] == "mixed_int8"
    assert sidecar["converter"]["float_nodes"] == list(candidate.float_layers)


def test_the_pipelines_optimize_step_adds_the_mixed_candidate_with_its_trace(wine, tmp_path):
    from tfopt.components.config.pipeline_config import config_from_mapping
    from tfopt.components.pipeline.artifacts import PulledModel
    from tfopt.components.steps.optimize import derive
    from tfopt.optimizer.benchmark.environment import model_digest

    model = wine[0]
    config = config_from_mapping({
        "source": str(model.saved_model), "workdir": str(tmp_path / "work"),
        "evaluation": {"data": str(model.eval_data)},
        "calibration": {"data": str(model.calibration_data)},
        "gate": {"max_accuracy_drop_abs": BUDGET},
        "candidates": {"targets": ["onnx"], "onnx_flavours": ["optimized", "static_int8"],
                       "calibration_samples": 50}})
    assert config.candidates.precision_search == "auto"
    pulled = PulledModel(uri=str(model.saved_model), path=str(model.saved_model),
                         digest=model_digest(model.saved_model))
    made, _ = derive(config, pulled, None, tmp_path / "step")
    mixed = next(m for m in made if m.label == "onnx_mixed_int8")
    assert any("normalize" in layer for layer in mixed.float_layers)
    assert mixed.trace[0]["strategy"] == "relaxed"
    assert mixed.trace[0]["float_layers"] == list(mixed.float_layers)
    assert mixed.trace[0]["result"]["tried"]
    # what the gate step hands the report: the search's outcome, read from the records
    from tfopt.optimizer.report.precision_search import precision_outcomes, precision_search_lines

    outcomes = precision_outcomes([m.to_dict() for m in made])
    assert list(outcomes) == ["onnx_mixed_int8"]
    section = "\n".join(precision_search_lines(outcomes))
    assert all(f"`{layer}`" in section for layer in mixed.float_layers)
    assert section.count("| yes |") + section.count("| no |") == len(
        mixed.trace[0]["result"]["tried"])


def test_an_unknown_precision_search_in_the_config_is_one_line_naming_it():
    from tfopt.components.config.pipeline_config import config_from_mapping
    from tfopt.optimizer.errors import TfoptError

    with pytest.raises(TfoptError, match="precision_search"):
        config_from_mapping({"source": "/x", "candidates": {"precision_search": "fast"}})


def test_a_layer_that_reads_one_tensor_twice_is_costed(tmp_path):
    # a square as Mul(d, d), as TensorFlow's LayerNormalization converts: timed alone, its
    # one-node model declared d twice as a graph input, which ONNX Runtime refused to load
    from onnx import TensorProto, helper

    from tfopt.optimizer.search.precision.onnx_runtime import OnnxLayerCosts, OnnxPrecisionModel

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    mean = helper.make_tensor("mean", TensorProto.FLOAT, [64], [0.5] * 64)
    nodes = [helper.make_node("Add", ["x", "mean"], ["d"], name="centre"),
             helper.make_node("Mul", ["d", "d"], ["y"], name="square")]
    graph = helper.make_graph(nodes, "squared", [x], [y], [mean])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, 64)).astype(np.float32)} for _ in range(4)]
    precision = OnnxPrecisionModel(model.SerializeToString(), feeds, tmp_path / "search")
    int8, floats, edges = OnnxLayerCosts(tmp_path / "costs.json").table_costs(precision)
    assert set(int8) == set(floats) == {"centre", "square"}
    assert [(a, b) for a, b, _ in edges] == [("<input>", "centre"), ("centre", "square"),
                                            ("square", "<output>")]
