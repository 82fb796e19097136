"""tfopt gate RESULT.json: every check printed; exit 0 promote, 3 reject, 2 bad input."""

import json

import pytest
from benchmark_testing import noisy_samples, synthetic_result, top1_fidelity
from cli_testing import assert_clean_failure, run_tfopt

N = 150


@pytest.fixture
def results(tmp_path):
    def save(name, speedup, agreement=1.0):
        result = synthetic_result(
            {1: noisy_samples(0.002, N, 0)},
            {"optimized": {"samples": {1: noisy_samples(0.002 / speedup, N, 1)},
                           "fidelity": top1_fidelity(agreement)}})
        return result.save(tmp_path / f"{name}.json")

    return save


def test_a_passing_candidate_exits_0_and_every_check_is_printed(results, tmp_path):
    decision_path = tmp_path / "decision.json"
    proc = run_tfopt("gate", results("win", 1.6), "--json-file", decision_path)
    assert proc.returncode == 0, proc.stderr
    assert "candidate    optimized: PROMOTE" in proc.stdout
    assert "PASS  latency" in proc.stdout and "1.6" in proc.stdout
    assert "PASS  accuracy_drop_abs" in proc.stdout
    assert proc.stdout.rstrip().endswith("decision     PROMOTE optimized")
    assert json.loads(decision_path.read_text())["chosen"] == "optimized"


def test_a_rejected_candidate_exits_3_with_the_reason(results):
    proc = run_tfopt("gate", results("slow", 0.7, agreement=0.9))
    assert proc.returncode == 3, proc.stderr
    assert "FAIL  latency" in proc.stdout and "latency regressed: 1.4" in proc.stdout
    assert "FAIL  accuracy_drop_abs" in proc.stdout
    assert "REJECT: no candidate passes every check; keep the baseline" in proc.stdout


def test_the_config_file_sets_the_thresholds(results, tmp_path):
    config = tmp_path / "gate.yaml"
    config.write_text("min_speedup: 2.0\n")
    proc = run_tfopt("gate", results("win", 1.6), "--config", config)
    assert proc.returncode == 3
    assert "threshold >= 2x" in proc.stdout
    assert "latency improvement too small" in proc.stdout


def test_unknown_config_key_is_one_line(results, tmp_path):
    config = tmp_path / "gate.yaml"
    config.write_text("min_speedup: 1.1\nmax_acuracy_drop: 0.01\n")
    proc = run_tfopt("gate", results("win", 1.6), "--config", config)
    assert_clean_failure(proc, 2, "unknown key 'max_acuracy_drop'", str(config))


@pytest.mark.parametrize("content, phrase", [
    ("not json at all", "is not JSON"),
    ('{"some": "thing"}', "is not a tfopt benchmark result"),
    ('{"format_version": 1, "baseline": {}}', "missing field"),
])
def test_bad_result_json_is_one_line_exit_2(tmp_path, content, phrase):
    path = tmp_path / "RESULT.json"
    path.write_text(content)
    assert_clean_failure(run_tfopt("gate", path), 2, phrase)


def test_missing_result_json(tmp_path):
    assert_clean_failure(run_tfopt("gate", tmp_path / "nope.json"), 2,
                         "no such benchmark result")


def test_help_documents_the_exit_codes():
    proc = run_tfopt("gate", "--help")
    assert proc.returncode == 0
    assert "0 a candidate is promoted; 3 rejected" in proc.stdout
