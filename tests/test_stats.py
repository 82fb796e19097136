"""Latency summaries and the paired block-bootstrap interval of the p50 ratio."""

import numpy as np
import pytest

from tfopt.optimizer.benchmark.stats import (
    LatencySummary,
    default_block,
    head_to_head_interval,
    p50_ratio_interval,
    round_figures,
    tie_unresolved,
    tied,
)


def test_summary_has_percentiles_mean_and_throughput_for_the_batch():
    seconds = np.linspace(0.001, 0.002, 101)
    summary = LatencySummary.of(seconds, batch_size=8)
    assert summary.runs == 101
    assert summary.p50 == pytest.approx(0.0015)
    assert summary.p90 == pytest.approx(0.0019)
    assert summary.p99 == pytest.approx(0.00199)
    assert summary.mean == pytest.approx(0.0015)
    assert summary.throughput == pytest.approx(8 / 0.0015)


def test_identical_samples_give_a_ratio_of_one_and_an_interval_around_it():
    rng = np.random.default_rng(0)
    a = 0.001 * np.exp(rng.normal(0, 0.1, 400))
    interval = p50_ratio_interval(a, a.copy())
    assert interval.ratio == 1.0
    assert interval.low <= 1.0 <= interval.high


def test_a_true_twenty_percent_speedup_is_bracketed_and_excludes_one():
    rng = np.random.default_rng(1)
    base = 0.001 * np.exp(rng.normal(0, 0.1, 500))
    cand = 0.0008 * np.exp(rng.normal(0, 0.1, 500))
    interval = p50_ratio_interval(base, cand)
    assert interval.low < 0.8 < interval.high
    assert interval.high < 1.0
    assert interval.speedup == pytest.approx(1 / interval.ratio)


@pytest.mark.parametrize("rounds, spread, seed", [(600, 0.8, 2), (50, 0.45, 5)])
def test_pairing_cancels_load_shared_by_both_models_in_a_round(rounds, spread, seed):
    # Background load multiplies both calls of a round alike; the ratio is taken per round,
    # so the interval stays narrow around the true 0.9 even though each model's own spread is
    # huge. (As a ratio of the two models' medians it kept that spread: ~0.2 wide on ResNet50
    # at 50 rounds, where the load's coefficient of variation was 0.47.)
    rng = np.random.default_rng(seed)
    load = np.exp(rng.normal(0, spread, rounds))
    base = 0.001 * load * np.exp(rng.normal(0, 0.01, rounds))
    cand = 0.0009 * load * np.exp(rng.normal(0, 0.01, rounds))
    interval = p50_ratio_interval(base, cand)
    assert interval.ratio == pytest.approx(np.median(cand / base))
    assert interval.low < 0.9 < interval.high
    assert interval.width < 0.02


def test_blocks_widen_the_interval_when_load_comes_in_bursts():
    # Slow drift that hits only the candidate (e.g. it was unlucky with a burst): rounds are
    # correlated, and single-round resampling would claim more certainty than the data holds.
    rng = np.random.default_rng(3)
    n = 900
    drift = np.repeat(np.exp(rng.normal(0, 0.2, n // 60)), 60)
    base = 0.001 * np.exp(rng.normal(0, 0.05, n))
    cand = 0.001 * drift * np.exp(rng.normal(0, 0.05, n))
    single = p50_ratio_interval(base, cand, block=1)
    blocked = p50_ratio_interval(base, cand)
    assert blocked.block == default_block(n) == 30
    assert blocked.width > 1.5 * single.width


def test_same_samples_same_interval():
    rng = np.random.default_rng(4)
    a, b = rng.random(200) + 1, rng.random(200) + 1
    assert p50_ratio_interval(a, b) == p50_ratio_interval(a, b)


def test_higher_confidence_gives_a_wider_interval():
    rng = np.random.default_rng(5)
    a, b = rng.random(300) + 1, rng.random(300) + 1
    assert p50_ratio_interval(a, b, 0.99).width > p50_ratio_interval(a, b, 0.8).width


@pytest.mark.parametrize("a, b, message", [
    ([1.0, 2.0], [1.0], "equal lengths"),
    ([1.0], [1.0], "at least 2 rounds"),
])
def test_unpaired_or_too_few_samples_are_refused(a, b, message):
    with pytest.raises(ValueError, match=message):
        p50_ratio_interval(a, b)


def test_a_rounds_figure_is_the_median_of_its_block_of_calls():
    calls = [1.0, 9.0, 2.0, 3.0, 3.0, 50.0, 4.0, 4.0]  # two rounds of four calls
    assert round_figures(calls, 4).tolist() == [2.5, 4.0]
    assert round_figures(calls).tolist() == calls  # a block of one is the call


def test_calls_that_do_not_fill_whole_rounds_are_refused():
    with pytest.raises(ValueError, match="7 timed calls do not split into rounds of 4"):
        round_figures([1.0] * 7, 4)



def test_head_to_head_is_other_over_fastest_per_round_and_unresolved_while_it_straddles_1():
    load = np.exp(np.random.default_rng(0).normal(0.0, 0.3, 60))  # cancels in each round
    fastest = 0.001 * load * np.exp(np.random.default_rng(1).normal(0.0, 0.02, 60))

    def other(factor):
        return 0.001 * factor * load * np.exp(np.random.default_rng(2).normal(0.0, 0.02, 60))

    slower = head_to_head_interval(fastest, other(1.20))
    assert 1.15 < slower.ratio < 1.25 and not tied(slower) and not tie_unresolved(slower)
    same = head_to_head_interval(fastest, other(1.0))
    assert tied(same) and tie_unresolved(same)
    faster = head_to_head_interval(fastest, other(0.8))  # shown faster: tied, and resolved
    assert tied(faster) and not tie_unresolved(faster)
