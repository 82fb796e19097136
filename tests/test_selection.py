"""The gate chooses among candidates of every format: the fastest inside the accuracy budget,
never one that breaks it, however fast."""

import dataclasses
import json

import numpy as np
import pytest
from benchmark_testing import noisy_samples, synthetic_result, top1_fidelity, with_damaged_weights

from tfopt.optimizer.benchmark.harness import BenchmarkConfig
from tfopt.optimizer.candidates.candidate import Candidate
from tfopt.optimizer.candidates.litert.convert import convert_to_litert
from tfopt.optimizer.gate.near_ties import precision_of_label, precision_rank
from tfopt.optimizer.gate.selection import select_candidate
from tfopt.optimizer.gate.verdict import GateConfig, evaluate_gate
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze

# no twin of the baseline: these tests need the frozen digits model (~1.25x) chosen at
# min_speedup 1.0, and under a heavy load two loads of a small model were measured up to 1.4x
# apart (the twin's part of the gate is tested in tests/test_gate.py)
QUICK = BenchmarkConfig(batch_sizes=(1,), warmup=3, min_runs=40, min_seconds=0.5, twin=False)


@pytest.fixture(scope="module")
def made(tmp_path_factory, digits_model):
    root = tmp_path_factory.mktemp("selection")
    digits = digits_model
    frozen = write_saved_model(freeze(digits.saved_model), root / "frozen")
    damaged = write_saved_model(with_damaged_weights(freeze(digits.saved_model)),
                                root / "damaged")
    (root / "broken").mkdir()
    broken = convert_to_litert(damaged, root / "broken" / "model.tflite", "dynamic_int8").path
    return digits, [
        Candidate("frozen", "savedmodel", "fp32", "savedmodel", "tensorflow", str(frozen), ""),
        Candidate("broken_int8", "litert", "dynamic_int8", "tflite", "ai-edge-litert",
                  str(broken), ""),
    ]


def test_a_faster_candidate_that_breaks_the_budget_is_never_chosen(made):
    digits, candidates = made
    # min_speedup 1.0: only "faster with confidence", which the frozen graph (~1.25x) always is
    selection = select_candidate(digits.saved_model, candidates,
                                 GateConfig(max_accuracy_drop_abs=0.005, min_speedup=1.0), QUICK,
                                 eval_data=digits.eval_data)
    rows = {r["label"]: r for r in selection.rows()}
    broken, frozen = rows["broken_int8"], rows["frozen"]
    assert broken["speedup"] > frozen["speedup"]  # the LiteRT int8 file is the fastest...
    assert broken["accuracy_drop"] > 0.3  # ...and far outside the budget
    assert broken["verdict"] == "rejected"
    assert any("accuracy dropped too much" in reason for reason in broken["reasons"])
    assert selection.chosen.label == "frozen" and frozen["verdict"] == "chosen"


def test_candidates_json_lists_every_candidate_with_format_latency_accuracy_and_verdict(
        made, tmp_path):
    digits, candidates = made
    selection = select_candidate(digits.saved_model, candidates,
                                 GateConfig(max_accuracy_drop_abs=0.005, min_speedup=1.0), QUICK,
                                 eval_data=digits.eval_data)
    written = json.loads(selection.write_json(tmp_path / "candidates.json").read_text())
    assert {r["label"] for r in written["candidates"]} == {"frozen", "broken_int8"}
    assert {r["label"]: r["format"] for r in written["candidates"]} == {
        "frozen": "savedmodel", "broken_int8": "tflite"}
    for row in written["candidates"]:
        assert row["p50_seconds"] > 0 and row["size_bytes"] > 0
        assert row["accuracy_kind"] == "top1" and 0 <= row["accuracy"] <= 1
    assert {r["label"]: r["verdict"] for r in written["candidates"]} == {
        "frozen": "chosen", "broken_int8": "rejected"}
    ratios = [r["ratio_to_baseline"] for r in written["candidates"]]
    assert ratios == sorted(ratios)  # fastest first


# --- near ties: the gate prefers precision among candidates it cannot tell apart -------------

def _timed(speedups: dict[str, float], noise: float = 0.05):
    rounds = 200
    return synthetic_result(
        {1: noisy_samples(0.002, rounds, 0, noise)},
        {label: {"samples": {1: noisy_samples(0.002 / s, rounds, i + 1, noise)},
                 "fidelity": top1_fidelity()}
         for i, (label, s) in enumerate(speedups.items())})


def test_precision_rank_orders_float32_reduced_floats_and_int8():
    assert [precision_rank(precision_of_label(label)) for label in
            ("optimized", "xla", "litert_fp32", "onnx_optimized", "bf16", "litert_fp16",
             "openvino_bf16", "litert_dynamic_int8", "onnx_static_int8", "openvino_int8")
            ] == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_a_candidate_s_precision_is_read_from_its_variant_not_its_label(tmp_path):
    from tfopt.optimizer.candidates.candidate import FLOAT32, INT8, REDUCED_FLOAT

    def made(label, variant):
        return Candidate(label, "litert", variant, "tflite", "ai-edge-litert",
                         str(tmp_path / label / "model.tflite"), "")

    assert [made("plain", v).precision for v in ("fp32", "fp16", "full_int8")] == [
        FLOAT32, REDUCED_FLOAT, INT8]
    assert made("litert_int8_but_float", "fp32").precision == FLOAT32


def test_in_a_tie_the_records_precision_decides_where_labels_say_nothing():
    from tfopt.optimizer.candidates.candidate import FLOAT32, INT8, REDUCED_FLOAT

    # timed as in the test below, where litert_fp32 ties with an fp16 and an int8 twin
    result = _timed({"a": 20.0, "b": 20.0, "c": 20.0, "d": 1.5})
    by_label = evaluate_gate(result)
    fastest = max(by_label.verdicts, key=lambda v: v.speedup).candidate
    assert fastest != "c" and by_label.chosen == fastest  # all equal by label: the fastest
    precisions = {"a": REDUCED_FLOAT, "b": INT8, "c": FLOAT32, "d": REDUCED_FLOAT}
    assert evaluate_gate(result, precisions=precisions).chosen == "c"


def test_among_candidates_the_benchmark_cannot_tell_apart_the_most_precise_is_chosen():
    decision = evaluate_gate(_timed({"litert_fp16": 20.0, "litert_dynamic_int8": 20.0,
                                     "litert_fp32": 20.0, "bf16": 1.5}))
    fastest = max(decision.verdicts, key=lambda v: v.speedup).candidate
    assert fastest != "litert_fp32"  # the measured order alone would not choose it
    ends = {label: decision.intervals[label][1] for label in ("litert_fp32", fastest)}
    assert ends["litert_fp32"].low <= ends[fastest].high  # a tie, as the gate saw it
    assert decision.chosen == "litert_fp32"


def test_candidates_timed_in_the_same_rounds_are_compared_head_to_head():
    # The machine's load slows every model of a round alike (a common factor per round); the
    # baseline has noise of its own. Against the baseline, bf16 (1.8x) and fp32 (1.54x) overlap;
    # head to head, round by round, the common factor cancels and bf16 is clearly faster.
    rounds, rng = 40, np.random.default_rng(7)
    load = np.exp(rng.normal(0.0, 0.5, rounds))

    def timed(speedup, seed):
        return 0.01 / speedup * load * np.exp(np.random.default_rng(seed).normal(0, 0.02, rounds))

    result = synthetic_result(
        {1: noisy_samples(0.01, rounds, 0, 0.3)},
        {"bf16": {"samples": {1: timed(1.8, 1)}, "fidelity": top1_fidelity()},
         "litert_fp32": {"samples": {1: timed(1.54, 2)}, "fidelity": top1_fidelity()}})
    decision = evaluate_gate(result, GateConfig(min_speedup=1.0))
    bf16, fp32 = (decision.intervals[label][1] for label in ("bf16", "litert_fp32"))
    assert fp32.low <= bf16.high  # the old rule's tie
    assert decision.chosen == "bf16"


def _in_two_groups(bf16_speedup, xla_speedup, seed, rounds=100, noise=0.2):
    """bf16 timed beside the baseline in one group, xla in another: each group has its own
    load, which slows its baseline and its candidate alike, round by round."""
    rng = np.random.default_rng(seed)

    def group(speedup):
        load = np.exp(rng.normal(0.0, 0.5, rounds))
        return (0.01 * load * np.exp(rng.normal(0, noise, rounds)),
                0.01 / speedup * load * np.exp(rng.normal(0, noise, rounds)))

    (base_a, bf16), (base_b, xla) = group(bf16_speedup), group(xla_speedup)
    result = synthetic_result({1: base_a}, {
        "bf16": {"samples": {1: bf16}, "fidelity": top1_fidelity()},
        "xla": {"samples": {1: xla}, "fidelity": top1_fidelity()}})
    xla = dataclasses.replace(result.candidate("xla"),
                              baseline_samples={1: tuple(float(v) for v in base_b)})
    return dataclasses.replace(result, candidates=(result.candidate("bf16"), xla))


def test_candidates_timed_in_different_groups_are_compared_through_their_own_baselines():
    # bf16 at 1.8x, xla at 1.58x: their intervals against the baseline overlap, but each
    # group's ratios, resampled in their own rounds, tell them apart
    decision = evaluate_gate(_in_two_groups(1.8, 1.58, seed=1), GateConfig(min_speedup=1.0))
    bf16, xla = (decision.intervals[label][1] for label in ("bf16", "xla"))
    assert bf16.low <= xla.high  # the old rule's tie
    assert decision.chosen == "bf16"
    # 1.8x against 1.78x stays a tie: the more precise xla is served
    decision = evaluate_gate(_in_two_groups(1.8, 1.78, seed=0, noise=0.15),
                             GateConfig(min_speedup=1.0))
    assert decision.chosen == "xla"


def test_a_clearly_faster_less_precise_candidate_is_still_chosen():
    decision = evaluate_gate(_timed({"litert_fp32": 20.0, "litert_fp16": 21.0,
                                     "litert_full_int8": 40.0}, noise=0.02))
    assert decision.chosen == "litert_full_int8"
    # among the float ones alone, fp16's 5% is resolved at this noise: no tie, fp16 wins
    assert evaluate_gate(_timed({"litert_fp32": 20.0, "litert_fp16": 21.0}, noise=0.02)
                         ).chosen == "litert_fp16"
