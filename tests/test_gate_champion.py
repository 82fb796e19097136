"""The gate judges a candidate against the champion it would replace, and never takes NaN for an
answer: synthetic results through ``evaluate_gate`` and the ``tfopt gate`` command.

A run beside a champion measures the input (the ``reference``) too: the accuracy budget holds
against both, so a constant model cannot replace an accurate champion because it is as bad as
its own input. Without labels, a champion made from another source model is not compared at
all, and is kept unless ``allow_latency_only_replacement`` says otherwise.
"""

from __future__ import annotations

import dataclasses

from benchmark_testing import measurement, noisy_samples, synthetic_result, top1_fidelity
from cli_testing import run_tfopt

from tfopt.optimizer.benchmark.result import CHAMPION, REFERENCE, Fidelity, Quality
from tfopt.optimizer.gate.verdict import GateConfig, evaluate_gate

N = 60
FAST, SLOW = 0.001, 0.002  # seconds per call: the candidate 2x faster than the champion


def top1(value: float) -> Quality:
    return Quality("top1", value, True, 450, "eval.npz")


def beside_a_champion(candidate: dict, champion_quality: Quality | None = None,
                      input_quality: Quality | None = None,
                      champion_source: str | None = None):
    """A result whose baseline is a champion (``champion_source``: the digest of the source
    it records) and whose input was measured beside it, as the pipeline's benchmark does."""
    result = synthetic_result({1: noisy_samples(SLOW, N, 0)},
                              {"cand": {"samples": {1: noisy_samples(FAST, N, 1)}, **candidate}},
                              baseline_quality=champion_quality, baseline_role=CHAMPION)
    reference = measurement("input", REFERENCE, {}, quality=input_quality)
    return dataclasses.replace(
        result, reference=reference,
        baseline=dataclasses.replace(result.baseline, label="champion-v1",
                                     source_digest=champion_source))


def checks(decision) -> dict:
    return {c.name: c for c in decision.verdict("cand").checks}


def test_a_constant_model_as_bad_as_its_input_does_not_replace_an_accurate_champion():
    result = beside_a_champion({"quality": top1(0.10), "fidelity": top1_fidelity()},
                               champion_quality=top1(1.0), input_quality=top1(0.10))

    decision = evaluate_gate(result)

    assert not decision.promote
    assert checks(decision)["accuracy_drop_abs"].passed  # within the input's budget...
    against = checks(decision)["champion_accuracy_drop_abs"]  # ...far below the champion's
    assert not against.passed and against.measured == 0.9
    assert against.reason.startswith("worse than the champion: top1 0.1000 against the "
                                     "champion champion-v1's 1.0000")
    assert "accuracy against champion-v1 (the champion: top1 on labelled data" in (
        decision.comparisons)


def test_a_candidate_within_the_budget_of_both_the_input_and_the_champion_is_promoted():
    result = beside_a_champion({"quality": top1(0.975), "fidelity": top1_fidelity()},
                               champion_quality=top1(0.98), input_quality=top1(0.975))

    decision = evaluate_gate(result)

    assert decision.chosen == "cand"
    assert checks(decision)["champion_accuracy_drop_abs"].passed


def test_the_relative_budget_holds_against_the_champion_too():
    result = beside_a_champion({"quality": top1(0.90), "fidelity": top1_fidelity()},
                               champion_quality=top1(0.95), input_quality=top1(0.90))

    decision = evaluate_gate(result, GateConfig(max_accuracy_drop_abs=None,
                                                max_accuracy_drop_rel=0.02))

    assert not decision.promote
    assert not checks(decision)["champion_accuracy_drop_rel"].passed


def test_without_labels_a_champion_from_another_source_is_kept_unless_latency_only_is_allowed():
    result = beside_a_champion({"fidelity": top1_fidelity()},
                               champion_source="sha256:another-model")

    kept = evaluate_gate(result)
    replaced = evaluate_gate(result, GateConfig(allow_latency_only_replacement=True))

    assert not kept.promote
    refused = checks(kept)["champion_comparison"]
    assert not refused.passed
    assert refused.reason.startswith("accuracy cannot be compared with the champion "
                                     "champion-v1: no labelled data")
    assert "allow_latency_only_replacement" in refused.reason
    assert "another source model, so no candidate may replace it" in kept.comparisons
    assert replaced.chosen == "cand"
    assert "latency-only replacement allowed" in replaced.comparisons


def test_without_labels_a_champion_made_from_this_same_input_is_judged_through_fidelity():
    result = beside_a_champion({"fidelity": top1_fidelity()}, champion_source="sha256:input")

    decision = evaluate_gate(result)

    assert decision.chosen == "cand"
    assert checks(decision)["champion_comparison"].passed
    assert "optimized from the same input" in decision.comparisons


def test_a_candidate_answering_nan_where_the_input_is_finite_is_rejected_naming_nan():
    broken = dataclasses.replace(top1_fidelity(), nan_values=40, inf_values=0)
    result = synthetic_result({1: noisy_samples(SLOW, N, 0)},
                              {"cand": {"samples": {1: noisy_samples(FAST, N, 1)},
                                        "fidelity": broken}})

    decision = evaluate_gate(result)

    assert not decision.promote
    finite = checks(decision)["finite_outputs"]
    assert not finite.passed
    assert finite.reason == ("outputs not finite: 40 NaN values where the input's outputs are "
                             "finite (on generated inputs)")


def test_an_inf_output_is_named_as_inf():
    broken = Fidelity(0.0, 0.0, 1.0, 3, "eval data", nan_values=0, inf_values=1)
    result = synthetic_result({1: noisy_samples(SLOW, N, 0)},
                              {"cand": {"samples": {1: noisy_samples(FAST, N, 1)},
                                        "fidelity": broken}})

    assert "1 Inf value where" in checks(evaluate_gate(result))["finite_outputs"].reason


def test_a_metric_of_nan_is_worse_than_any_budget():
    result = beside_a_champion({"quality": Quality("mse", float("nan"), False, 450, "e.npz"),
                                "fidelity": top1_fidelity()},
                               champion_quality=Quality("mse", 0.1, False, 450, "e.npz"),
                               input_quality=Quality("mse", 0.1, False, 450, "e.npz"))

    decision = evaluate_gate(result)

    assert not checks(decision)["accuracy_drop_abs"].passed
    assert not checks(decision)["champion_accuracy_drop_abs"].passed


def test_tfopt_gate_says_what_was_compared_and_rejects_a_candidate_worse_than_the_champion(
        tmp_path):
    result = beside_a_champion({"quality": top1(0.10), "fidelity": top1_fidelity()},
                               champion_quality=top1(1.0), input_quality=top1(0.10))
    path = result.save(tmp_path / "result.json")

    done = run_tfopt("gate", path)

    assert done.returncode == 3, done.stderr
    assert ("compared     latency against champion-v1 (champion); accuracy against input "
            "(the input: top1 on labelled data (450 examples)); accuracy against champion-v1"
            in done.stdout)
    assert "FAIL  champion_accuracy_drop_abs" in done.stdout
