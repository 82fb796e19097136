"""Every door runs one flow: the pipeline (``tfopt run``, here through ``tfopt.run``),
``tfopt optimize --targets`` and the Python API's ``optimize`` build the same candidates from
the same model, measure the same accuracy on the same eval data, hold them to the same budget,
and write the same row fields. Only what timing noise cannot move is compared: what each
candidate is, its accuracy, its accuracy check; not latencies, speedups or the choice."""

import json
from pathlib import Path

import pytest

from tfopt.components import api
from tfopt.components.cli import main
from tfopt.components.config.pipeline_config import PipelineConfig

STEADY = ("label", "target", "variant", "format", "runtime", "calibration", "accuracy",
          "accuracy_kind", "baseline_accuracy", "accuracy_drop")


def _steady(rows: list[dict]) -> dict:
    return {r["label"]: {k: r.get(k) for k in STEADY} for r in rows if r["verdict"] != "skipped"}


def _accuracy_reasons(rows: list[dict]) -> dict:
    """label -> why not, as far as accuracy is concerned (deterministic, unlike latency's)."""
    return {r["label"]: sorted(x for x in r["reasons"] if "accuracy" in x) for r in rows}


@pytest.mark.slow
def test_the_pipeline_the_cli_and_the_api_build_and_judge_the_same_candidates(
        digits_model, tmp_path, capsys):
    eval_data = str(digits_model.eval_data)
    pipeline = api.run(
        {"source": str(digits_model.saved_model), "workdir": str(tmp_path / "work"),
         "evaluation": {"data": eval_data},
         "benchmark": {"batch_sizes": [1], "min_runs": 30, "min_seconds": 0.5, "warmup": 3},
         "candidates": {"targets": ["litert"]},
         "tuning": {"enabled": False}},
        publish=False)
    report = json.loads((Path(pipeline.gate.report_dir) / "report.json").read_text())
    code = main(["optimize", str(digits_model.saved_model), str(tmp_path / "cli"),
                 "--targets", "litert", "--eval-data", eval_data,
                 "--seconds", "0.5", "--json"])
    cli = json.loads(capsys.readouterr().out)
    ours = api.optimize(digits_model.saved_model, tmp_path / "api",
                        targets="litert", eval_data=eval_data, seconds=0.5)
    assert code == ours.exit_code

    by_pipeline = _steady(report["candidates"])
    by_cli, by_api = _steady(cli["candidates"]), _steady(ours.rows)
    # the pipeline measures the frozen and the optimized graphs too
    shared = {"litert_fp32", "litert_fp16", "litert_dynamic_int8", "litert_full_int8"}
    assert shared <= set(by_pipeline) and shared <= set(by_cli) and set(by_api) == set(by_cli)
    for label in shared:
        assert by_cli[label] == by_api[label] == by_pipeline[label], label
    # the same accuracy checks, passed or failed for the same reason
    reasons = [_accuracy_reasons(rows) for rows in (report["candidates"], cli["candidates"],
                                                    ours.rows)]
    assert all({label: r[label] for label in shared} == {label: reasons[0][label]
                                                         for label in shared}
               for r in reasons)
    # one budget by every door: the gate's default
    assert cli["accuracy_budget"] == ours.accuracy_budget \
        == PipelineConfig.model_validate({"source": "m"}).gate.max_accuracy_drop_abs
    # the same fields in every row
    assert {frozenset(r) for r in report["candidates"] if r["verdict"] != "skipped"} \
        == {frozenset(r) for r in cli["candidates"] if r["verdict"] != "skipped"}
