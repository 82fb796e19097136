"""tfopt optimize: freeze, apply a recipe, check the outputs against SRC, write only if they agree."""

import json
import sys

import perturbing_transforms
import pytest
from cli_testing import assert_clean_failure, run_tfopt

from tfopt.components.cli import main
from tfopt.optimizer.model.export import read_provenance
from tfopt.optimizer.model.savedmodel import list_signatures
from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE
from tfopt.optimizer.transforms import registry
from tfopt.optimizer.verify.equivalence import compare


@pytest.fixture
def test_only_transforms(monkeypatch):
    """``perturb_weights`` and ``refuse_always`` in the registry for one test."""
    module_name = "_test_only_perturbing_transforms"
    monkeypatch.setitem(sys.modules, f"tfopt.optimizer.transforms.{module_name}", perturbing_transforms)
    monkeypatch.setitem(registry.TRANSFORM_MODULES, "perturb_weights", module_name)
    monkeypatch.setitem(registry.TRANSFORM_MODULES, "refuse_always", module_name)


def _nothing_written(dst):
    assert not dst.exists()
    leftovers = [p for p in dst.parent.iterdir() if p.name.startswith(f".{dst.name}.partial")]
    assert not leftovers, leftovers


def _same_signature(src, dst, name="serving_default"):
    """DST holds the optimized signature only, with the keys, dtypes and shapes SRC gave it."""
    before, after = list_signatures(src)[name], list_signatures(dst)
    assert list(after) == [name]
    assert after[name].same_contract(before), (before, after[name])


def test_optimize_writes_dst_with_the_source_signature_and_outputs(model_dir, tmp_path, capsys):
    src, dst, trace = model_dir("keras_cnn"), tmp_path / "optimized", tmp_path / "trace.json"

    code = main(["optimize", str(src), str(dst), "--transforms", "strip_unused_nodes",
                 "--trace", str(trace)])

    out = capsys.readouterr().out
    assert code == 0
    _same_signature(src, dst)
    # strip_unused_nodes changes no arithmetic; 1e-5 is what freezing alone is held to.
    assert compare(src, dst).max_abs_diff <= 1e-5
    for line in ("recipe       strip_unused_nodes", "op ", "before", "after", "graph        ",
                 "SavedModel   ", "equivalence  max abs diff", "tolerance    atol 0.0001: within",
                 f"wrote        {dst}"):
        assert line in out, line
    provenance = read_provenance(dst)
    assert provenance["recipe"] == "strip_unused_nodes"
    assert [step["transform"] for step in provenance["trace"]] == ["strip_unused_nodes"]
    steps = json.loads(trace.read_text())["steps"]
    assert [step["transform"] for step in steps] == ["strip_unused_nodes"]
    assert steps[0]["nodes_before"] > 0


def test_a_yaml_config_works_the_same_as_the_transforms_string(model_dir, tmp_path, capsys):
    src = model_dir("tf_module_two_signatures")
    config = tmp_path / "recipe.yaml"
    config.write_text("transforms:\n  - name: strip_unused_nodes\n    type: float\n"
                      "tolerance: {atol: 1e-5}\n")
    common = ["--signature", "calibrated", "--json"]

    assert main(["optimize", str(src), str(tmp_path / "from_string"),
                 "--transforms", "strip_unused_nodes(type=float)", "--atol", "1e-5",
                 *common]) == 0
    from_string = json.loads(capsys.readouterr().out)
    assert main(["optimize", str(src), str(tmp_path / "from_yaml"), "--config", str(config),
                 *common]) == 0
    from_yaml = json.loads(capsys.readouterr().out)

    for key in ("recipe", "backend", "tolerance", "accepted", "graph", "signature"):
        assert from_yaml[key] == from_string[key], key
    assert from_yaml["recipe"] == "strip_unused_nodes(type=float)"
    assert from_yaml["tolerance"]["atol"] == 1e-5
    assert from_yaml["written"] == str(tmp_path / "from_yaml")
    _same_signature(src, tmp_path / "from_yaml", "calibrated")
    report = compare(src, tmp_path / "from_yaml", signature_name="calibrated")
    assert report.max_abs_diff <= 1e-5


def test_outputs_that_diverge_exit_4_with_the_figures_and_nothing_written(
        model_dir, tmp_path, capsys, test_only_transforms):
    dst = tmp_path / "optimized"

    code = main(["optimize", str(model_dir("keras_cnn")), str(dst),
                 "--transforms", "strip_unused_nodes perturb_weights(amount=0.5)"])

    captured = capsys.readouterr()
    assert code == 4
    assert "equivalence  max abs diff" in captured.out
    assert "tolerance    atol 0.0001: EXCEEDED" in captured.out
    assert "nothing written" in captured.out
    error = captured.err.strip().splitlines()[-1]
    assert error.startswith("tfopt: error: optimized outputs differ from ")
    assert "> atol 0.0001" in error and "nothing written" in error
    _nothing_written(dst)


def test_a_refusing_transform_exits_2_with_its_reason(model_dir, tmp_path, capsys,
                                                      test_only_transforms):
    dst = tmp_path / "optimized"
    code = main(["optimize", str(model_dir("tf_module_two_signatures")), str(dst),
                 "--transforms", "strip_unused_nodes refuse_always"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "tfopt: error: refuse_always: measured 1.8x slower than the original, refused"
    _nothing_written(dst)


def test_the_native_backend_runs_the_recipe_through_gtt(model_dir, tmp_path, capsys):
    src, dst = model_dir("tf_module_two_signatures"), tmp_path / "optimized"
    code = main(["optimize", str(src), str(dst), "--backend", "native",
                 "--transforms", "strip_unused_nodes fold_constants(ignore_errors=true)"])
    out = capsys.readouterr().out
    assert code == 0
    assert "native:strip_unused_nodes" in out
    assert "native:fold_constants(ignore_errors=true)" in out
    assert read_provenance(dst)["backend"] == "native"
    assert compare(src, dst).max_abs_diff <= 1e-5


def test_an_unknown_transform_exits_2_listing_the_valid_names(model_dir, tmp_path, capsys):
    dst = tmp_path / "optimized"
    code = main(["optimize", str(model_dir("tf_module_two_signatures")), str(dst),
                 "--transforms", "strip_unused_nodes fold_everything"])
    assert code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("tfopt: error: unknown transform 'fold_everything'")
    assert all(name in error for name in registry.transform_names())
    _nothing_written(dst)


def test_a_recipe_syntax_error_exits_2_with_its_position(tmp_path, capsys):
    dst = tmp_path / "optimized"
    code = main(["optimize", str(tmp_path / "src"), str(dst),
                 "--transforms", "remove_nodes(op=Identity"])
    assert code == 2
    assert "recipe syntax error at column 25" in capsys.readouterr().err
    _nothing_written(dst)


def test_the_recipe_is_given_by_at_most_one_of_recipe_transforms_or_recipe_file(tmp_path,
                                                                                  capsys):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    for flags in (["--transforms", "strip_unused_nodes", "--recipe-file", "recipe.yaml"],
                  ["--recipe", "inference", "--transforms", "strip_unused_nodes"],
                  # --config: the recipe file's old name, still read
                  ["--recipe", "inference", "--config", "recipe.yaml"]):
        with pytest.raises(SystemExit) as caught:
            main(["optimize", src, dst, *flags])
        assert caught.value.code == 2
        assert "not allowed with argument" in capsys.readouterr().err
    assert main(["optimize", src, dst, "--transforms", "inference"]) == 2
    assert "'inference' is a named recipe, not a transform: use --recipe inference" in \
        capsys.readouterr().err


def test_the_real_command_fails_cleanly_on_bad_input(model_dir, tmp_path):
    dst = tmp_path / "optimized"
    result = run_tfopt("optimize", model_dir("keras_cnn"), dst,
                       "--transforms", "strip_unused_nodes fold_everything")
    assert_clean_failure(result, 2, "unknown transform 'fold_everything'", "strip_unused_nodes")
    _nothing_written(dst)

    result = run_tfopt("optimize", model_dir("keras_cnn"), dst, "--config",
                       tmp_path / "missing.yaml")
    assert_clean_failure(result, 2, "no such recipe file", "missing.yaml")
    _nothing_written(dst)


def test_an_lstm_optimized_with_the_inference_recipe_keeps_identical_outputs(
        model_dir, tmp_path, capsys):
    src, dst = model_dir("keras_lstm"), tmp_path / "optimized"
    assert INFERENCE_RECIPE == ("strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) "
                                "fold_constants(ignore_errors=true) fold_batch_norms "
                                "fold_old_batch_norms rewrite_gelu_erf flatten_dense_matmuls "
                                "einsum_as_batch_matmul fold_embedding_projections "
                                "constant_reshape_shapes "
                                "merge_duplicate_nodes")

    code = main(["optimize", str(src), str(dst), "--transforms", INFERENCE_RECIPE,
                 "--atol", "1e-5"])

    assert code == 0, capsys.readouterr().err
    _same_signature(src, dst)
    # An LSTM has no batch norm to fold; every other step must leave its arithmetic exact
    # up to float32 reassociation, hence the tighter 1e-5.
    assert compare(src, dst, batches=4, seed=7).max_abs_diff <= 1e-5
    trace = read_provenance(dst)["trace"]
    assert len(trace) == 11
    assert trace[-1]["nodes_after"] < trace[0]["nodes_before"]
