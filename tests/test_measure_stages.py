"""The measuring stages exist once: the pipeline's benchmark, evaluate and gate steps and
``tfopt optimize --targets``' :func:`~tfopt.optimizer.gate.selection.select_candidate` call the same
three library functions, so that on the same models and labelled data they report the same
accuracy, fidelity, candidate rows and verdict fields; only timing may differ between runs.

The digits CNN is the input; its candidates are its frozen graph (the same outputs) and a
copy with damaged weights (an accuracy the gate must refuse, however fast it is)."""

import json
from pathlib import Path

import pytest
from benchmark_testing import with_damaged_weights

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import CandidateModel, PulledModel
from tfopt.components.pipeline.workspace import Workspace
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.gate.selection import CANDIDATES_FILE, select_candidate
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.verify.evaluation import load_labelled_data

# the rows' timing fields, measured anew by each door
TIMED = {"p50_seconds", "ratio_to_baseline", "ratio_interval", "speedup", "verdict", "reasons",
         "path"}


@pytest.fixture(scope="module")
def doors(digits_model, tmp_path_factory):
    """(the pipeline's benchmark, evaluate and gate outputs, select_candidate's Selection)."""
    from tfopt.components.steps.benchmark import benchmark
    from tfopt.components.steps.evaluate import evaluate
    from tfopt.components.steps.gate import gate

    root = tmp_path_factory.mktemp("measure_stages")
    frozen = freeze(digits_model.saved_model)
    write_saved_model(frozen, root / "frozen")
    write_saved_model(with_damaged_weights(frozen), root / "damaged")
    candidates = [CandidateModel(label=label, path=str(root / label), kind=kind,
                                 digest=model_digest(root / label))
                  for label, kind in (("frozen", "frozen"), ("damaged", "optimized"))]
    config = PipelineConfig(
        source=str(digits_model.saved_model), workdir=str(root / "work"),
        evaluation={"data": str(digits_model.eval_data)},
        benchmark={"batch_sizes": [1], "warmup": 2, "min_runs": 10, "min_seconds": 0.2,
                   "max_seconds": 0, "twin": False},
        tuning={"enabled": False})
    pulled = PulledModel(uri=str(digits_model.saved_model), path=str(digits_model.saved_model),
                         digest=model_digest(digits_model.saved_model))
    ws = Workspace(root / "ws")
    measured = benchmark(config, pulled, candidates, None, ws)
    evaluation = evaluate(config, measured, ws)
    judged = gate(config, evaluation, ws)
    selection = select_candidate(
        digits_model.saved_model, [c.candidate() for c in candidates], config.gate,
        config.benchmark.settings(settle_speedup=config.gate.min_speedup,
                                  confidence=config.gate.confidence, signature=config.signature),
        eval_data=load_labelled_data(digits_model.eval_data), metric=config.evaluation.metric,
        policy=config.security.scan_policy())
    return measured, evaluation, judged, selection


def test_both_doors_time_the_eval_rows_and_the_benchmark_alone_measures_no_accuracy(doors):
    from tfopt.optimizer.benchmark.result import load_result

    measured, evaluation, _, selection = doors
    timed = load_result(measured.result_path)
    for result in (timed, load_result(evaluation.result_path), selection.result):
        assert result.settings.inputs.startswith("rows of ")
        assert result.settings.inputs.endswith("digits_eval.npz")
    # the benchmark step's own record: timing only, its accuracy is the evaluate step's
    assert all(m.quality is None and m.fidelity is None for m in timed.measured)


def test_the_pipeline_and_select_candidate_measure_the_same_quality_and_fidelity(doors,
                                                                                 digits_model):
    from tfopt.optimizer.benchmark.result import load_result

    _, evaluation, _, selection = doors
    evaluated = load_result(evaluation.result_path)
    assert [m.label for m in evaluated.measured] == [m.label for m in selection.result.measured]
    for ours, theirs in zip(evaluated.measured, selection.result.measured):
        assert ours.quality == theirs.quality, ours.label
        assert ours.fidelity == theirs.fidelity, ours.label
    by_label = {m.label: m for m in evaluated.measured}
    assert by_label["input"].quality.value == pytest.approx(digits_model.test_accuracy, abs=1e-6)
    assert by_label["input"].quality.examples == len(load_labelled_data(digits_model.eval_data))
    assert by_label["input"].fidelity is None  # the reference itself
    assert by_label["frozen"].fidelity.inputs == "eval data"
    assert by_label["frozen"].fidelity.top1_agreement == 1.0
    assert by_label["damaged"].quality.value < by_label["input"].quality.value - 0.3
    assert evaluation.scores == {m.label: m.quality.value for m in evaluated.measured}


def test_the_pipeline_and_select_candidate_give_the_same_candidate_rows_and_verdict_fields(
        doors):
    _, _, judged, selection = doors
    # beside the verdict, as tfopt optimize --targets writes it beside the chosen model
    written = json.loads((Path(judged.verdict_path).parent / CANDIDATES_FILE).read_text())
    ours = {row["label"]: row for row in written["candidates"]}
    theirs = {row["label"]: row for row in selection.to_dict()["candidates"]}
    assert set(ours) == set(theirs) == {"frozen", "damaged"}
    assert set(written) == set(selection.to_dict())
    for label, row in ours.items():
        assert set(row) == set(theirs[label])
        assert {k: v for k, v in row.items() if k not in TIMED} == \
            {k: v for k, v in theirs[label].items() if k not in TIMED}, label
    # the damaged copy is refused on accuracy at both doors, in the same words
    for rows in (ours, theirs):
        assert rows["damaged"]["verdict"] == "rejected"
        assert rows["damaged"]["accuracy_kind"] == "top1"
        assert any(r.startswith("accuracy dropped too much: top1 ")
                   for r in rows["damaged"]["reasons"])
    verdict = json.loads(Path(judged.verdict_path).read_text())
    assert set(verdict) == set(selection.decision.to_dict())
    assert [v["candidate"] for v in verdict["verdicts"]] == \
        [v.candidate for v in selection.decision.verdicts]
