"""What ``tfopt`` prints: one JSON document on stdout with --json, for every command; -v and -q
on either side of the command; stage lines on stderr; the version; the exit codes from one
table; the example config that loads back; the inference recipe when none is named; a model's
own names escaped."""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil

import pytest
import yaml
from benchmark_testing import noisy_samples, synthetic_result, top1_fidelity
from cli_testing import error_lines, run_tfopt

from tfopt.components.cli import main
from tfopt.components.cli.stage_lines import PREFIX


def _stage_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(PREFIX)]


def _json(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(out)  # the whole of stdout is one document


@pytest.fixture(scope="module")
def result_file(tmp_path_factory):
    result = synthetic_result(
        {1: noisy_samples(0.002, 150, 0)},
        {"optimized": {"samples": {1: noisy_samples(0.002 / 1.6, 150, 1)},
                       "fidelity": top1_fidelity(1.0)}})
    return result.save(tmp_path_factory.mktemp("gate") / "RESULT.json")


def test_inspect_json_is_one_document(model_dir, capsys):
    assert main(["inspect", str(model_dir("keras_cnn")), "--json"]) == 0
    assert "serving_default" in _json(capsys)["signatures"]


def test_freeze_json_is_one_document_with_the_texts_fields(model_dir, tmp_path, capsys):
    assert main(["freeze", str(model_dir("keras_cnn")), str(tmp_path / "frozen"), "--json"]) == 0
    document = _json(capsys)
    assert document["written"] == str(tmp_path / "frozen")
    assert document["equivalence"]["max_abs_diff"] <= document["tolerance"]["atol"] == 1e-4
    assert document["nodes"] > 0 and document["size_bytes_after"] > 0


def test_gate_json_is_one_document_and_the_file_flag_still_writes(result_file, tmp_path,
                                                                   capsys):
    out = tmp_path / "decision.json"
    assert main(["gate", str(result_file), "--json", "--json-file", str(out)]) == 0
    document = _json(capsys)
    assert document["chosen"] == "optimized" and document["baseline"]["label"]
    assert json.loads(out.read_text())["chosen"] == "optimized"


def test_config_json_is_one_document(capsys):
    assert main(["config", "--example", "--json"]) == 0
    assert _json(capsys)["gate"]["confidence"] == 0.95


def test_step_json_is_one_document(model_dir, tmp_path, capsys):
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"source: {model_dir('keras_cnn')}\nworkdir: {tmp_path / 'work'}\n")
    assert main(["step", "pull", "--config", str(config), "--json", "-q"]) == 0
    assert _json(capsys)["digest"]


def test_optimize_with_no_recipe_named_applies_the_inference_recipe(model_dir, tmp_path,
                                                                     capsys):
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE, Recipe

    dst = tmp_path / "optimized"
    assert main(["optimize", str(model_dir("keras_cnn")), str(dst), "--json"]) == 0
    document = _json(capsys)
    assert document["recipe"] == Recipe.from_string(INFERENCE_RECIPE).text
    assert document["written"] == str(dst) and "optimize" in document["costs"]
    # and by name
    assert main(["optimize", str(model_dir("keras_cnn")), str(tmp_path / "deployment"),
                 "--recipe", "deployment", "--json", "-q"]) == 0
    assert "merge_duplicate_nodes" not in _json(capsys)["recipe"]


def test_the_real_benchmark_prints_one_json_document_and_vv_after_the_command_logs(
        model_dir, tmp_path, result_file):
    """One process: the benchmark owns its TensorFlow runtime. -vv after the command's name
    turns debug logging on; the stage lines and the harness's progress go to stderr, not stdout."""
    cnn = model_dir("keras_cnn")
    frozen = tmp_path / "frozen"
    shutil.copytree(cnn, frozen)
    done = run_tfopt("benchmark", cnn, frozen, "--batch-sizes", "1", "--min-runs", "5",
                     "--min-seconds", "0.1", "--max-seconds", "0", "--warmup", "1",
                     "--no-twin", "--json", "--json-file", tmp_path / "RESULT.json", "-vv",
                     timeout=600)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert {"result", "gate", "environment", "report", "result_file"} <= set(document)
    assert document["result"]["baseline"]["label"]
    assert (tmp_path / "RESULT.json").is_file()
    assert any(line.startswith(f"{PREFIX}benchmark ") for line in _stage_lines(done.stderr))
    assert " DEBUG tfopt.optimizer.benchmark.interleaved: timed" in done.stderr  # -vv, given after


def test_q_after_the_command_silences_the_stage_lines(model_dir, tmp_path, capsys):
    cnn = str(model_dir("keras_cnn"))
    assert main(["freeze", cnn, str(tmp_path / "a")]) == 0
    loud = capsys.readouterr().err
    assert [line.split()[1] for line in _stage_lines(loud)][-3:] == ["freeze", "check", "write"]
    assert main(["freeze", cnn, str(tmp_path / "b"), "-q"]) == 0
    assert _stage_lines(capsys.readouterr().err) == []
    assert main(["-q", "freeze", cnn, str(tmp_path / "c")]) == 0  # and before it
    assert _stage_lines(capsys.readouterr().err) == []


def test_v_and_q_are_accepted_after_every_command():
    from tfopt.components.cli import build_parser

    parser = build_parser()
    for command, args in {"inspect": ["m"], "freeze": ["m", "d"], "benchmark": ["a", "b"],
                          "gate": ["r.json"], "optimize": ["m", "d"],
                          "run": ["--config", "c"], "step": ["pull", "--config", "c"],
                          "config": ["--example"]}.items():
        assert parser.parse_args([command, *args, "-v"]).verbose == 1
        assert parser.parse_args([command, *args, "-vv"]).verbose == 2
        assert parser.parse_args([command, *args, "-q"]).quiet is True
        assert parser.parse_args(["-v", command, *args]).verbose == 1
        assert parser.parse_args([command, *args]).verbose == 0


def test_version():
    from importlib.metadata import version

    done = run_tfopt("--version", timeout=60)
    assert done.returncode == 0
    assert done.stdout.strip() == f"tfopt {version('tfopt')}"


def _error_classes(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _error_classes(sub)


def test_help_lists_the_exit_codes_of_every_error_from_one_table(capsys):
    from tfopt import components, optimizer
    from tfopt.optimizer.errors import EXIT_CODES, TfoptError

    for package in (optimizer, components):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if module.name.endswith(("__main__", "worker")):
                continue
            try:
                importlib.import_module(module.name)
            except ModuleNotFoundError as exc:  # an optional extra (kfp) not installed
                if exc.name.split(".")[0] in ("optimizer", "components"):
                    raise
    codes = {cls.__name__: cls.exit_code for cls in _error_classes(TfoptError)}
    assert set(codes.values()) <= set(EXIT_CODES), codes
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for code, meaning in EXIT_CODES.items():
        assert f"{code:>3}  {meaning}" in text


def test_the_example_config_has_every_key_described_and_loads_back_as_the_defaults(
        tmp_path, capsys):
    from tfopt.components.cli.config_command import EXAMPLE_SOURCE
    from tfopt.components.config.pipeline_config import PipelineConfig, load_config

    assert main(["config", "--example"]) == 0
    text = capsys.readouterr().out
    path = tmp_path / "example.yaml"
    path.write_text(text)
    assert load_config(path) == PipelineConfig(source=EXAMPLE_SOURCE)
    data = yaml.safe_load(text)
    for name, field in PipelineConfig.model_fields["gate"].annotation.model_fields.items():
        assert name in data["gate"]
        if field.description:
            assert field.description[:40] in " ".join(
                line.strip("# ") for line in text.splitlines())
    # and what the pipeline reads from a file, printed back
    assert main(["config", "--config", str(path), "--set", "gate.min_speedup=1.2"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["gate"]["min_speedup"] == 1.2


def _hostile(model, tmp_path):
    """``model`` with a signature, an input key and a TF version holding a newline and a
    terminal escape sequence."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = tmp_path / "hostile"
    shutil.copytree(model, path)
    pb = path / "saved_model.pb"
    proto = saved_model_pb2.SavedModel.FromString(pb.read_bytes())
    graph = proto.meta_graphs[0]
    signature = graph.signature_def["serving_default"]
    key = next(iter(signature.inputs))
    signature.inputs["evil\nkey\x1b[2J"].CopyFrom(signature.inputs[key])
    del signature.inputs[key]
    graph.signature_def["evil\nsig\x1b[31m"].CopyFrom(signature)
    graph.meta_info_def.tensorflow_version = "2.0\r\x1b]0;owned\x07"
    pb.write_bytes(proto.SerializeToString())
    return path


def test_inspect_shows_a_models_names_escaped(model_dir, tmp_path, capsys):
    path = _hostile(model_dir("keras_cnn"), tmp_path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert "evil\\nsig\\x1b[31m(" in out and "evil\\nkey\\x1b[2J:" in out
    assert "2.0\\r\\x1b]0;owned\\x07" in out
    assert "evil\nsig" not in out and "evil\nkey" not in out  # no raw newline inside a name


def test_a_failure_is_still_one_error_line_after_the_stage_lines(model_dir, tmp_path, capsys):
    assert main(["freeze", str(model_dir("keras_cnn")), str(tmp_path / "x"), "--atol", "0",
                 "--signature", "nope"]) == 2
    err = capsys.readouterr().err
    assert error_lines(err) == [line for line in err.splitlines()
                                if line.startswith("tfopt: error: signature 'nope' not found")]
    assert len(error_lines(err)) == 1
