"""Memory: the benchmark times in groups what does not fit together, a model too big for the
budget is refused up front, and candidate workers give their memory back when they exit."""

import shutil

import pytest
from cli_testing import assert_clean_failure, run_tfopt

from optimizer.benchmark.footprint import PROCESS_BYTES, loaded_bytes
from optimizer.benchmark.harness import BenchmarkConfig, Subject
from optimizer.benchmark.memory_groups import plan_groups, run_benchmark_within
from optimizer.candidates import CandidateSettings, derive_candidates
from optimizer.gate import GateConfig, evaluate_gate
from optimizer.memory_budget import GIB, MemoryBudget, MemoryBudgetError
from optimizer.process_tree import _children, tree_rss_bytes

QUICK = BenchmarkConfig(warmup=2, min_runs=8, min_seconds=0.2, block_size=2, resamples=200)


def test_candidates_are_split_into_groups_that_fit_beside_the_baseline():
    budget = MemoryBudget(10, "test")
    assert plan_groups(4, [("a", 3), ("b", 3), ("c", 2)], budget) == ([["a", "b"], ["c"]], [])
    assert plan_groups(4, [("a", 1), ("b", 1)], budget) == ([["a", "b"]], [])


def test_a_candidate_that_fits_beside_the_baseline_in_no_group_is_left_out_with_its_need():
    groups, unfit = plan_groups(4 * GIB, [("small", GIB), ("big", 7 * GIB)],
                                MemoryBudget(10 * GIB, "test"))
    assert groups == [["small"]] and unfit == [("big", 11 * GIB)]


def test_when_no_candidate_fits_the_benchmark_is_refused_in_one_line_with_exit_7(model_dir):
    source = model_dir("keras_cnn")
    with pytest.raises(MemoryBudgetError, match=r"beside the baseline .* budget of") as refused:
        run_benchmark_within(MemoryBudget(2**20, "test"), Subject.baseline(source),
                             [Subject.candidate(source, label="same")], QUICK)
    assert refused.value.exit_code == 7


def test_a_budget_below_baseline_plus_candidates_times_them_in_groups_and_still_decides(
        model_dir, tmp_path, monkeypatch):
    from optimizer.benchmark import memory_groups

    # the budget is for the models: none of it taken by this test process
    monkeypatch.setattr(memory_groups, "tree_rss_bytes", lambda: 0)
    source = model_dir("keras_cnn")
    copies = []
    for name in ("first", "second"):
        shutil.copytree(source, tmp_path / name)
        copies.append(Subject.candidate(tmp_path / name, label=name))
    one = loaded_bytes(source)
    # room for the baseline and one candidate at a time, not two
    budget = MemoryBudget(PROCESS_BYTES + 2 * one + one // 2, "test")
    result = run_benchmark_within(budget, Subject.baseline(source, label="input"), copies, QUICK)
    assert [c.label for c in result.candidates] == ["first", "second"]
    assert any("timed in 2 groups" in note for note in result.notes)
    for candidate in result.candidates:
        assert candidate.baseline_samples is not None  # paired with its own group's rounds
        assert set(result.ratios[candidate.label]) == {1}
    decision = evaluate_gate(result, GateConfig(min_speedup=1.0))
    assert {v.candidate for v in decision.verdicts} == {"first", "second"}


def test_a_model_too_big_for_the_budget_is_refused_in_one_line_with_exit_7(model_dir,
                                                                          tmp_path):
    result = run_tfopt("optimize", model_dir("keras_cnn"), tmp_path / "out",
                       "--targets", "savedmodel", "--memory-gb", "0.01")
    assert_clean_failure(result, 7, "GiB of memory", "budget of 0.0 GiB")
    assert not (tmp_path / "out").exists()


def test_candidate_workers_exit_and_give_their_memory_back(model_dir, tmp_path):
    import os

    from optimizer.freeze import freeze
    from optimizer.process_tree import PROC

    source = model_dir("keras_cnn")
    frozen = freeze(source)
    # children this process had already (other tests' servers and workers) are not at issue
    children_before = set(_children(PROC).get(os.getpid(), []))
    before = tree_rss_bytes()
    made, skipped = derive_candidates(
        source, frozen, tmp_path, CandidateSettings(targets=("litert",),
                                                    litert_flavours=("fp32", "fp16")),
        in_workers=True)
    after = tree_rss_bytes()
    assert {c.label for c in made} == {"litert_fp32", "litert_fp16"}, skipped
    still_running = set(_children(PROC).get(os.getpid(), [])) - children_before
    assert not still_running, f"candidate workers still running: {still_running}"
    # the converter in this process would keep hundreds of MB; the workers took theirs
    assert after - before < 100 * 2**20, (before, after)


def test_workers_are_for_models_whose_builds_outweigh_a_tensorflow_import(model_dir, tmp_path):
    from optimizer.candidates import WORKERS_FROM_BYTES, builds_in_workers

    source = model_dir("keras_cnn")
    assert not builds_in_workers(source)  # a few hundred KB: built in this process
    big = tmp_path / "big"
    shutil.copytree(source, big)
    (big / "variables" / "padding.data").write_bytes(b"\0" * WORKERS_FROM_BYTES)
    assert builds_in_workers(big)
