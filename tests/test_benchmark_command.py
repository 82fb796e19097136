"""tfopt benchmark BASELINE CANDIDATE...: the real console script on small models."""

import json

import numpy as np
import pytest
from benchmark_testing import dense_stack
from cli_testing import assert_clean_failure, run_tfopt

from tfopt.optimizer.benchmark.result import load_result
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench_cli")
    stock = dense_stack(root / "stock", layers=3)
    write_saved_model(freeze(stock), root / "frozen")
    x = np.random.default_rng(0).standard_normal((30, 16)).astype(np.float32)
    np.savez(root / "eval.npz", x=x, y=np.arange(30) % 4)
    return root


def test_benchmark_writes_result_and_report(models, tmp_path):
    out, report = tmp_path / "RESULT.json", tmp_path / "report"
    proc = run_tfopt("benchmark", models / "stock", models / "frozen",
                     "--batch-sizes", "1,4", "--min-runs", "20", "--min-seconds", "0.2",
                     "--warmup", "3", "--threads", "1", "--onednn", "off", "--eval-data", models / "eval.npz",
                     "--json-file", out, "--report", report)
    assert proc.returncode == 0, proc.stderr
    assert "[tfopt] loading stock (input)" in proc.stderr
    assert "[tfopt] batch 4: timing 3 models interleaved" in proc.stderr  # and the twin
    assert "Traceback" not in proc.stderr
    for phrase in ("p50 ms", "speedup [95% CI]", "peak RSS growth", "top1 ", "environment  ",
                   "gate         ", f"result       {out}", "report       "):
        assert phrase in proc.stdout, phrase

    result = load_result(out)
    assert result.settings.batch_sizes == (1, 4)
    assert result.environment.runtime.intra_op_threads == 1  # --threads, applied before TF
    assert result.environment.runtime.onednn_enabled is False  # set before TF was imported
    assert result.environment.runtime.env["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert result.environment.runtime.settings_in_effect
    assert result.candidates[0].quality.value == result.baseline.quality.value

    markdown = (report / "report.md").read_text()
    for row in ("inference time (p50, batch 1)", "throughput (batch 4)",
                "accuracy (top1, 30 examples)", "graph size (on disk)"):
        assert f"| {row} |" in markdown
    assert "## Where the time goes (per-op profile)" in markdown
    for png in ("latency_distribution.png", "speedup.png"):
        assert (report / png).read_bytes()[:8] == PNG_MAGIC
    assert json.loads((report / "report.json").read_text())["gate"]["verdicts"]


def test_a_missing_candidate_is_one_line_before_any_timing(models, tmp_path):
    proc = run_tfopt("benchmark", models / "stock", tmp_path / "nowhere")
    assert_clean_failure(proc, 2, "no such SavedModel directory", "nowhere")


def test_candidates_must_share_the_baselines_signature(models, model_dir):
    proc = run_tfopt("benchmark", models / "stock", model_dir("tf1_saved_model"))
    assert_clean_failure(proc, 2, "has signature", "but the baseline has")


def test_unusable_eval_data_is_one_line(models, tmp_path):
    bad = tmp_path / "eval.npz"
    np.savez(bad, images=np.zeros((2, 16)))
    proc = run_tfopt("benchmark", models / "stock", models / "frozen", "--eval-data", bad)
    assert_clean_failure(proc, 2, "needs arrays 'x' and 'y'; found images")


def test_labels_the_metric_cannot_score_are_one_line_before_any_timing(models, tmp_path):
    regression_labels = tmp_path / "eval.npz"
    np.savez(regression_labels, x=np.zeros((6, 16), np.float32), y=np.zeros((6, 4)))
    proc = run_tfopt("benchmark", models / "stock", models / "frozen",
                     "--eval-data", regression_labels, "--metric", "top1")
    assert_clean_failure(proc, 2, "do not fit the model's output",
                         "for metric top1: it scores 1 label(s) per row, y has 4")
    # the same labels fit the same output when scored as a regression
    out = tmp_path / "RESULT.json"
    proc = run_tfopt("benchmark", models / "stock", models / "frozen", "--eval-data",
                     regression_labels, "--metric", "mse", "--batch-sizes", "1",
                     "--min-runs", "5", "--min-seconds", "0.1", "--no-profile", "--json-file", out)
    assert proc.returncode == 0, proc.stderr
    assert load_result(out).baseline.quality.metric == "mse"


def test_bad_batch_sizes_are_refused_by_the_parser(models):
    proc = run_tfopt("benchmark", models / "stock", models / "frozen", "--batch-sizes", "1,x")
    assert proc.returncode == 2
    assert "not a comma-separated list of integers" in proc.stderr


def test_the_timing_method_is_set_from_the_command_line_with_the_librarys_defaults(models,
                                                                                   tmp_path):
    import argparse

    from tfopt.components.cli.benchmark_command import add_parser
    from tfopt.optimizer.benchmark.harness import BenchmarkConfig

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    defaults = parser.parse_args(["benchmark", "a", "b"])
    library = BenchmarkConfig()
    for name in ("block_seconds", "max_seconds", "twin", "block_size", "min_runs", "warmup",
                 "min_seconds"):
        assert getattr(defaults, name) == getattr(library, name), name
    # --confidence is None until given: the gate config's level may be the one (test_cli_defaults)
    assert defaults.confidence is None

    out = tmp_path / "RESULT.json"
    proc = run_tfopt("benchmark", models / "stock", models / "frozen", "--batch-sizes", "1",
                     "--min-runs", "10", "--min-seconds", "0.1", "--warmup", "2",
                     "--block-size", "3", "--block-seconds", "0", "--max-seconds", "0",
                     "--no-twin", "--no-profile", "--json-file", out)
    assert proc.returncode == 0, proc.stderr
    result = load_result(out)
    assert result.twin is None
    assert result.settings.block_size == 3  # block-seconds 0: blocks are never shrunk
    assert all(len(m.samples[1]) % 3 == 0 and len(m.samples[1]) >= 30 for m in result.models)

    refused = run_tfopt("benchmark", models / "stock", models / "frozen", "--max-seconds", "-1")
    assert_clean_failure(refused, 2, "--max-seconds must not be negative, got -1.0")
