"""Models with string features and vocabulary tables through the whole pipeline.

A Keras ``StringLookup`` classifier and a TF Transform style model whose vocabulary is the
model's own asset file: freeze, optimize, candidates, benchmark, evaluate, gate and publish. The
frozen candidate gives the stock model's outputs exactly, in and out of the vocabulary, and the
optimized one up to float32 rounding (fold_embedding_projections folds the pooled Dense into the
embedding's rows);
LiteRT keeps the tables as its hash-table builtins and matches; a runtime or flavour that cannot
take strings is a skipped candidate with its one-line reason.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import string_models
import yaml
from cli_testing import run_tfopt
from string_models import OUT_OF_VOCABULARY, tokens

from tfopt.optimizer.candidates.build import CandidateSettings, derive_candidates
from tfopt.optimizer.inputs.calibration import from_rows
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.runtime import load_runner

BUILDERS = {"string_lookup": (string_models.keras_string_lookup, 5),
            "asset_vocabulary": (string_models.asset_vocabulary_lookup, 3)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (stock SavedModel, labelled .npz whose labels are the stock model's classes)."""
    root = tmp_path_factory.mktemp("string-models")
    built = {}
    for name, (build, length) in BUILDERS.items():
        build(root / name)
        runner = load_runner(root / name)
        x = tokens(200, length, seed=11)
        y = np.argmax(runner(dict.fromkeys(runner.signature.input_keys, x))
                      [runner.signature.output_keys[0]], axis=-1)
        np.savez(root / f"{name}.npz", x=x, y=y)
        built[name] = (root / name, root / f"{name}.npz")
    return built


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_litert_keeps_the_hash_table_and_what_cannot_take_strings_is_skipped(models, name,
                                                                            tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    stock, eval_data = models[name]
    signature = get_signature(stock)
    x = np.load(eval_data)["x"]
    made, skipped = derive_candidates(
        stock, freeze(stock), tmp_path, CandidateSettings(
            targets=("savedmodel", "litert"), savedmodel_variants=("xla",),
            litert_flavours=("fp32", "full_int8")),
        calibration=from_rows(signature, x, 10, source="eval data"))
    reasons = {s.label: s.reason for s in skipped}
    assert set(reasons) == {"litert_full_int8"}
    assert "cannot feed string input" in reasons["litert_full_int8"]
    assert "\n" not in reasons["litert_full_int8"]
    by_label = {c.label: c for c in made}
    assert set(by_label) == {"xla", "litert_fp32"}  # XLA takes the numeric part after lookup
    ops = {d["op_name"] for d in
           Interpreter(model_path=by_label["litert_fp32"].path)._get_ops_details()}
    assert {"HASHTABLE", "HASHTABLE_FIND", "CALL_ONCE"} <= ops  # builtins, no Flex
    key = signature.input_keys[0]
    feeds = {key: np.concatenate([x[:8], np.resize(OUT_OF_VOCABULARY, (1, x.shape[1]))])}
    want = load_runner(stock)(feeds)
    for candidate in made:
        got = load_runner(candidate.path)(feeds)
        for output, value in want.items():
            np.testing.assert_allclose(got[output], value, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_onnx_candidate_keeps_the_tables_and_gives_the_stock_outputs(models, name,
                                                                         tmp_path):
    """tf2onnx gets the tables TensorFlow initialized, as its command line passes them: the
    lookups become ONNX constants, and ONNX Runtime loads the model (it refused HashTableV2)."""
    import onnx

    from tfopt.optimizer.candidates.onnx.convert import convert_to_onnx

    stock, eval_data = models[name]
    x = np.load(eval_data)["x"]
    model = convert_to_onnx(stock, tmp_path / "model.onnx", "fp32")
    assert "HashTableV2" not in {n.op_type for n in onnx.load(model.path).graph.node}
    key = get_signature(stock).input_keys[0]
    feeds = {key: np.concatenate([x[:8], np.resize(OUT_OF_VOCABULARY, (1, x.shape[1]))])}
    want, got = load_runner(stock)(feeds), load_runner(model.path, format="onnx")(feeds)
    for output, value in want.items():
        np.testing.assert_allclose(got[output], value, rtol=0, atol=1e-6)


def test_optimize_with_targets_runs_a_string_lookup_model_end_to_end(models, tmp_path):
    stock, eval_data = models["string_lookup"]
    dst = tmp_path / "out"
    done = run_tfopt("optimize", stock, dst, "--targets", "savedmodel,litert", "--eval-data",
                     eval_data, "--seconds", "1", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["label"]: r for r in json.loads((dst / "candidates.json").read_text())
            ["candidates"]}
    # the stock model's outputs on the eval rows, out-of-vocabulary tokens included, up to
    # float32 rounding of the Dense folded into the embedding
    assert rows["optimized"]["max_rel_diff"] <= 1e-6
    assert rows["optimized"]["accuracy"] == 1.0
    assert rows["litert_fp32"]["max_rel_diff"] <= 1e-6
    assert rows["xla"]["max_rel_diff"] <= 1e-6
    assert rows["litert_full_int8"]["verdict"] == "skipped"
    chosen = next(r for r in rows.values() if r["verdict"] == "chosen")
    assert chosen["accuracy_drop"] <= 0.005


def test_the_pipeline_freezes_gates_and_publishes_an_asset_vocabulary_model(models, tmp_path,
                                                                            capsys):
    from tfopt.components.cli import main

    stock, eval_data = models["asset_vocabulary"]
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "source": str(stock), "workdir": str(tmp_path / "work"),
        "evaluation": {"data": str(eval_data)},
        "benchmark": {"batch_sizes": [1], "min_runs": 20, "min_seconds": 0.5, "warmup": 3},
        "candidates": {"targets": ["savedmodel", "litert"], "savedmodel_variants": [],
                       "litert_flavours": ["fp32"]},
        "tuning": {"enabled": False},
        "mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                   "experiment": "strings", "registered_model": "words"}}))
    code = main(["run", "--config", str(config), "--run-id", "strings-1", "--json"])
    outcome = json.loads(capsys.readouterr().out)
    assert code in (0, 3)
    candidates = {c["label"]: c for c in outcome["candidates"]}
    assert set(candidates) == {"frozen", "optimized", "litert_fp32"}
    feeds = {"words": tokens(10, 3, seed=12)}
    want = load_runner(stock)(feeds)["scores"]
    for label, atol in (("frozen", 0), ("optimized", 1e-5)):
        written = Path(candidates[label]["path"])
        assert not (written / "assets").exists() or not any((written / "assets").iterdir())
        np.testing.assert_allclose(load_runner(written)(feeds)["scores"], want, atol=atol, rtol=0)
    evaluation = json.loads(Path(outcome["evaluate"]["result_path"]).read_text())
    fidelity = {m["label"]: m["fidelity"] for m in evaluation["candidates"]}
    assert fidelity["frozen"]["max_abs_diff"] == 0.0
    assert fidelity["optimized"]["max_abs_diff"] <= 1e-5
    assert fidelity["litert_fp32"]["max_abs_diff"] <= 1e-5
    assert outcome["publish"]["version"]
