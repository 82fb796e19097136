"""The Python door (tfopt.components.api, ``tfopt.optimize`` / ``tfopt.run``): the same flow as the
CLI's, returning typed values and raising typed errors instead of printing and exiting."""

import json

import pytest

from tfopt.components import api
from tfopt.components.cli import main
from tfopt.components.pipeline.run import PipelineOutcome
from tfopt.optimizer.errors import DestinationError, InvalidInputsError
from tfopt.optimizer.optimize.with_targets import OptimizeOutcome

# What does not depend on timing noise: what each candidate is and what it measured on the
# eval data (accuracy is deterministic: the same calibration, the same data).
STEADY = ("label", "format", "runtime", "calibration", "accuracy", "accuracy_kind",
          "accuracy_drop", "baseline_accuracy")


def _steady(rows: list[dict]) -> dict:
    return {r["label"]: {k: r.get(k) for k in STEADY} for r in rows}


def test_optimize_with_targets_gives_what_tfopt_optimize_targets_gives(
        digits_model, tmp_path, capsys):
    outcome = api.optimize(digits_model.saved_model, tmp_path / "api", targets=["litert"],
                           eval_data=str(digits_model.eval_data), seconds=0.5)
    assert isinstance(outcome, OptimizeOutcome)
    code = main(["optimize", str(digits_model.saved_model), str(tmp_path / "cli"),
                 "--targets", "litert", "--eval-data", str(digits_model.eval_data),
                 "--seconds", "0.5", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == outcome.exit_code
    # the same candidates, measured to the same accuracy, held to the same budget
    assert _steady(outcome.rows) == _steady(document["candidates"])
    assert {"litert_fp32", "litert_fp16", "litert_dynamic_int8", "litert_full_int8"} \
        <= set(_steady(outcome.rows))
    ours = outcome.to_dict()
    assert set(ours) == set(document) - {"costs"}
    for key in ("accuracy_kind", "input_accuracy", "accuracy_budget", "recipe"):
        assert ours[key] == document[key]
    assert outcome.accuracy_budget == 0.01  # the library's default, as the CLI's
    if outcome.passed:
        assert outcome.chosen.label in _steady(outcome.rows)
        assert outcome.written == tmp_path / "api"
        assert (tmp_path / "api" / "candidates.json").is_file()
        assert outcome.load_with and outcome.speedup > 0
    else:
        assert outcome.written is None and not (tmp_path / "api").exists()


def test_optimize_without_targets_writes_the_inference_recipes_savedmodel(model_dir, tmp_path):
    outcome = api.optimize(model_dir("keras_cnn"), tmp_path / "fast")
    assert outcome.passed and outcome.selection is None and outcome.chosen is None
    assert outcome.written == tmp_path / "fast"
    assert (tmp_path / "fast" / "saved_model.pb").is_file()
    assert outcome.result.accepted and outcome.result.candidate.recipe
    assert outcome.to_dict()["saved_model_bytes_after"] > 0


def test_bad_input_raises_the_librarys_typed_error_not_an_exit(model_dir, tmp_path):
    with pytest.raises(InvalidInputsError, match="unknown target 'tpu'"):
        api.optimize(model_dir("keras_cnn"), tmp_path / "x", targets="tpu")
    (tmp_path / "taken").mkdir()
    with pytest.raises(DestinationError) as caught:
        api.optimize(model_dir("keras_cnn"), tmp_path / "taken")
    assert caught.value.exit_code != 0


@pytest.mark.slow
def test_run_returns_the_pipelines_outcome_on_a_mapping_config(model_dir, tmp_path):
    said = []
    outcome = api.run(
        {"source": str(model_dir("keras_cnn")), "workdir": str(tmp_path / "work"),
         "benchmark": {"batch_sizes": [1], "min_runs": 30, "min_seconds": 0.5, "warmup": 3},
         "tuning": {"enabled": False}},
        overrides={"mlflow.tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                   "mlflow.experiment": "api", "mlflow.registered_model": "cnn"},
        run_id="api-1", progress=said.append)
    assert isinstance(outcome, PipelineOutcome)
    assert [c.label for c in outcome.candidates][:2] == ["frozen", "optimized"]
    assert outcome.publish is not None and outcome.publish.registered_model == "cnn"
    assert (outcome.publish.version is not None) == outcome.gate.promote
    assert said[0] == "pull ..." and said[-1].startswith("publish ")


def test_run_without_a_source_is_the_configs_typed_error():
    from tfopt.components.config.pipeline_config import ConfigError

    with pytest.raises(ConfigError, match="source"):
        api.run()
    with pytest.raises(ConfigError, match="gate.min_speedup"):
        api.run({"source": "/models/m"}, overrides={"gate.min_speedup": "fast"})
