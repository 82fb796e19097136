"""Memory: the benchmark times in groups what does not fit together, a model too big for the
budget is refused up front, and candidate workers give their memory back when they exit."""

import shutil

import pytest
from cli_testing import assert_clean_failure, run_tfopt

from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject
from tfopt.optimizer.benchmark.memory_groups import plan_groups, run_benchmark_within
from tfopt.optimizer.candidates.build import CandidateSettings, derive_candidates
from tfopt.optimizer.gate.verdict import GateConfig, evaluate_gate
from tfopt.optimizer.model.footprint import PROCESS_BYTES, LoadCost, group_bytes
from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget, MemoryBudgetError
from tfopt.optimizer.system.process_tree import _children, tree_rss_bytes

QUICK = BenchmarkConfig(warmup=2, min_runs=8, min_seconds=0.2, block_size=2, resamples=200)


def _costs(*pairs):
    return [(label, LoadCost(kept)) for label, kept in pairs]


def test_candidates_are_split_into_groups_that_fit_beside_the_baseline():
    budget = MemoryBudget(10, "test")
    assert plan_groups(4, _costs(("a", 3), ("b", 3), ("c", 2)), budget) == (
        [["a", "b"], ["c"]], [])
    assert plan_groups(4, _costs(("a", 1), ("b", 1)), budget) == ([["a", "b"]], [])


def test_a_candidate_that_fits_beside_the_baseline_in_no_group_is_left_out_with_its_need():
    groups, unfit = plan_groups(4 * GIB, _costs(("small", GIB), ("big", 7 * GIB)),
                                MemoryBudget(10 * GIB, "test"))
    assert groups == [["small"]] and unfit == [("big", 11 * GIB)]


def test_a_group_holds_what_its_models_keep_and_peaks_at_the_largest_transient():
    # measured in one process (mlp_100mb): the models keep theirs, and only the load under
    # way adds its transient; adding peaks counted every transient at once
    assert group_bytes([LoadCost(2, 5), LoadCost(3, 1), LoadCost(1, 4)]) == 2 + 3 + 1 + 5
    budget = MemoryBudget(100, "test")
    # kept 1 + 2 + 2, the largest transient 4: 9 fits beside 1 fixed; a third one does not
    assert plan_groups(1, [("a", LoadCost(2, 4)), ("b", LoadCost(2, 4)), ("c", LoadCost(2))],
                       budget, target_bytes=10, always=[LoadCost(1, 1)]) == (
        [["a", "b"], ["c"]], [])


def test_the_optimized_models_estimate_is_a_frozen_ones_whatever_its_variant(model_dir,
                                                                              tmp_path):
    # the optimized candidate's variant is "fp32", which has no factor of its own: it was
    # estimated as a stock SavedModel, at a third of what its load costs
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.footprint import FROZEN_FACTOR, FROZEN_KEPT_FACTOR, disk_bytes
    from tfopt.optimizer.model.freeze import freeze

    frozen = write_saved_model(freeze(model_dir("keras_cnn")), tmp_path / "optimized")
    size = disk_bytes(frozen)
    for variant in (None, "fp32"):
        cost = LoadCost.of(frozen, "savedmodel", variant)
        assert cost.kept == int(FROZEN_KEPT_FACTOR * size)
        assert cost.kept + cost.transient == int(FROZEN_FACTOR * size)
    stock = LoadCost.of(model_dir("keras_cnn"), "savedmodel", "fp32")
    assert stock.kept + stock.transient < FROZEN_FACTOR * disk_bytes(model_dir("keras_cnn"))


def test_when_no_candidate_fits_the_benchmark_is_refused_in_one_line_with_exit_7(model_dir):
    source = model_dir("keras_cnn")
    with pytest.raises(MemoryBudgetError, match=r"beside the baseline .* budget of") as refused:
        run_benchmark_within(MemoryBudget(2**20, "test"), Subject.baseline(source),
                             [Subject.candidate(source, label="same")], QUICK)
    assert refused.value.exit_code == 7


def test_a_budget_below_baseline_plus_candidates_times_them_in_groups_and_still_decides(
        model_dir, tmp_path, monkeypatch):
    from tfopt.optimizer.benchmark import memory_groups

    # the budget is for the models: none of it taken by this test process
    monkeypatch.setattr(memory_groups, "tree_rss_bytes", lambda: 0)
    source = model_dir("keras_cnn")
    copies = []
    for name in ("first", "second"):
        shutil.copytree(source, tmp_path / name)
        copies.append(Subject.candidate(tmp_path / name, label=name))
    one = LoadCost.of(source)
    # room for the baseline and one candidate at a time, not two
    budget = MemoryBudget(PROCESS_BYTES + group_bytes([one, one]) + one.kept // 2, "test")
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

    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.system.process_tree import PROC

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
    from tfopt.optimizer.model.footprint import WORKERS_FROM_BYTES, builds_in_workers

    source = model_dir("keras_cnn")
    assert not builds_in_workers(source)  # a few hundred KB: built in this process
    big = tmp_path / "big"
    shutil.copytree(source, big)
    (big / "variables" / "padding.data").write_bytes(b"\0" * WORKERS_FROM_BYTES)
    assert builds_in_workers(big)


def test_a_big_models_groups_fit_the_working_set_and_one_over_it_is_left_out():
    budget = MemoryBudget(100, "test")
    # XLA of a big model: timed alone beside the baseline it would take the step over twice
    # converting the model by hand, which the working set stands for
    assert plan_groups(4, _costs(("a", 3), ("big", 20), ("b", 3), ("c", 2)), budget,
                       target_bytes=10) == ([["a", "b"], ["c"]], [("big", 24)])
    # a candidate joins the first group it fits in, not only the last
    assert plan_groups(4, _costs(("a", 4), ("b", 3), ("c", 2)), budget,
                       target_bytes=10) == ([["a", "c"], ["b"]], [])
    # a target above the budget is the budget
    assert plan_groups(4, _costs(("a", 50), ("b", 50)), budget, target_bytes=1000) == (
        [["a"], ["b"]], [])


def test_a_candidate_build_that_cannot_fit_the_budget_is_skipped_with_its_estimate(
        model_dir, tmp_path):
    from tfopt.optimizer.model.freeze import freeze

    source = model_dir("keras_cnn")
    made, skipped = derive_candidates(
        source, freeze(source), tmp_path,
        CandidateSettings(targets=("litert",), litert_flavours=("fp32", "fp16")),
        in_workers=True, budget=MemoryBudget(GIB // 4, "test"))
    assert made == []
    assert [s.label for s in skipped] == ["litert_fp32", "litert_fp16"]
    assert all("needs an estimated" in s.reason and "budget of 0.2 GiB (test)" in s.reason
               for s in skipped)


def _padded(source, tmp_path):
    """``source`` copied with padding beside its variables: as big on disk as a model that
    gets worker processes, loading as fast as the original."""
    from tfopt.optimizer.model.footprint import WORKERS_FROM_BYTES

    big = tmp_path / "big"
    shutil.copytree(source, big)
    (big / "variables" / "padding.data").write_bytes(b"\0" * WORKERS_FROM_BYTES)
    return big


def test_a_big_model_is_optimized_in_a_worker_to_the_same_result(model_dir, tmp_path):
    import gc
    from pathlib import Path

    from tfopt.optimizer.optimize.flow import optimize, write_optimized
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE
    from tfopt.optimizer.optimize.worker import OutlinedModel, full_model
    from tfopt.optimizer.verify.equivalence import compare

    source = _padded(model_dir("keras_cnn"), tmp_path)
    here = optimize(source, INFERENCE_RECIPE, in_worker=False)
    there = optimize(source, INFERENCE_RECIPE)  # by size: in a worker
    assert isinstance(there.original, OutlinedModel)
    assert isinstance(there.candidate.model, OutlinedModel)
    # the same graphs, node for node, reported the same; checked the same
    assert there.to_dict()["graph"] == here.to_dict()["graph"]
    assert there.accepted and there.report.max_abs_diff == pytest.approx(
        here.report.max_abs_diff, abs=1e-6)
    assert [t.to_dict()["transform"] for t in there.candidate.trace] == [
        t.to_dict()["transform"] for t in here.candidate.trace]
    # the outline has no weights; the full graph comes back from the worker's file
    outline = there.candidate.model
    assert not any(n.attr["value"].tensor.tensor_content for n in outline.graph_def.node)
    assert outline.size_bytes == here.candidate.model.size_bytes
    assert full_model(outline).graph_def == here.candidate.model.graph_def
    written = write_optimized(there, tmp_path / "out")
    assert compare(str(source), str(written)).max_abs_diff <= 1e-4
    # the worker's files go with the result
    scratch = Path(outline.stored).parent
    del there, outline
    gc.collect()
    assert not scratch.exists()


def test_a_refusal_in_the_optimize_worker_is_the_same_typed_one_line_error(model_dir):
    from tfopt.optimizer.errors import UnknownSignatureError
    from tfopt.optimizer.optimize.flow import optimize
    from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE

    with pytest.raises(UnknownSignatureError, match="signature 'nope' not found"):
        optimize(model_dir("keras_cnn"), INFERENCE_RECIPE, signature_name="nope",
                 in_worker=True)


def test_a_big_models_benchmark_runs_in_a_process_of_its_own(model_dir, tmp_path,
                                                            monkeypatch):
    from tfopt.optimizer.benchmark import memory_groups

    source = _padded(model_dir("keras_cnn"), tmp_path)
    in_processes = []
    run_group = memory_groups._run_in_process

    def counted(baseline, group, *args):
        in_processes.append([s.label for s in group])
        return run_group(baseline, group, *args)

    monkeypatch.setattr(memory_groups, "_run_in_process", counted)
    # no candidate fits the working set (a lone XLA of a big model): rather than no verdict,
    # it is timed beside the baseline within the budget
    monkeypatch.setattr(memory_groups, "working_set_bytes", lambda path: 1)
    said = []
    result = run_benchmark_within(MemoryBudget(64 * GIB, "test"),
                                  Subject.baseline(source, label="input"),
                                  [Subject.candidate(model_dir("keras_cnn"), label="same")],
                                  QUICK, progress=said.append)
    assert any("within the budget instead" in line for line in said), said
    assert in_processes == [["same"]]  # the budget is ample: one group, not this process
    assert [c.label for c in result.candidates] == ["same"]
    assert set(result.ratios["same"]) == {1}


def test_a_build_whose_worker_crosses_the_budget_is_stopped_and_the_others_still_made(
        tmp_path):
    """The litert worker holds the 1.9 GiB of calibration feeds its job carries, which its
    estimate (from the model's size on disk) does not see; the watchdog stops it, well before
    its TensorFlow import, and the OpenVINO worker (no feeds, no TensorFlow) still builds."""
    import keras
    import numpy as np

    from tfopt.optimizer.candidates.build_estimates import build_bytes
    from tfopt.optimizer.inputs.calibration import Calibration
    from tfopt.optimizer.model.freeze import freeze

    inputs = keras.Input((1024, 1024, 3), name="image")
    outputs = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 1)(inputs))
    keras.Model(inputs, outputs).export(str(tmp_path / "wide"), verbose=False)
    feeds = tuple({"image": np.full((1, 1024, 1024, 3), i, np.float32)} for i in range(160))
    # both builds are estimated to fit (the budget is above the larger estimate)
    estimate = build_bytes(tmp_path / "wide", ["litert_full_int8", "openvino_fp32"])
    budget = MemoryBudget(tree_rss_bytes() + estimate + GIB // 10, "test")
    made, skipped = derive_candidates(
        tmp_path / "wide", freeze(tmp_path / "wide"), tmp_path / "candidates",
        CandidateSettings(targets=("litert", "openvino"), litert_flavours=("full_int8",),
                          openvino_flavours=("fp32",)),
        calibration=Calibration(feeds, "test feeds"), in_workers=True, budget=budget)
    assert [c.label for c in made] == ["openvino_fp32"], skipped
    assert [s.label for s in skipped] == ["litert_full_int8"]
    stopped = skipped[0].reason
    assert stopped.startswith("stopped at ") and stopped.endswith(
        " GiB, over the memory budget of " + budget.describe()), stopped
    assert float(stopped.split()[2]) > budget.bytes / GIB - 0.05


def test_a_groups_estimate_is_its_largest_flavours_and_onnx_costs_most_on_a_big_model(
        model_dir, tmp_path):
    from tfopt.optimizer.candidates.build import LITERT_FLAVOURS
    from tfopt.optimizer.candidates.build_estimates import build_bytes

    source = model_dir("keras_cnn")
    litert = [f"litert_{flavour}" for flavour in LITERT_FLAVOURS]
    assert build_bytes(source, litert) == build_bytes(source, ["litert_full_int8"])
    assert build_bytes(source, ["litert_full_int8"]) > build_bytes(source, ["litert_fp32"])
    big = _padded(source, tmp_path)  # tf2onnx's conversion grows fastest with the size
    assert build_bytes(big, ["onnx_static_int8"]) > max(
        build_bytes(big, [label]) for label in ("bf16", "xla", *litert, "openvino_int8"))
