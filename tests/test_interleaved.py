"""Interleaved timing: rounds of blocks, warm-up, minimum runs and duration, order rotation,
progress."""

import time

import pytest

from tfopt.optimizer.benchmark.interleaved import scaled_block_size, time_interleaved


def recorder():
    calls = []

    def make(name):
        return lambda: calls.append(name)

    return calls, make


def test_each_model_is_warmed_up_then_called_once_per_round():
    calls, make = recorder()
    samples = time_interleaved({"a": make("a"), "b": make("b")}, warmup=2, min_runs=3,
                               min_seconds=0)
    assert calls == ["a", "a", "b", "b", "a", "b", "a", "b", "a", "b"]
    assert len(samples["a"].seconds) == len(samples["b"].seconds) == 3


def test_rotating_order_puts_every_model_in_every_position():
    calls, make = recorder()
    time_interleaved({"a": make("a"), "b": make("b"), "c": make("c")}, warmup=0, min_runs=3,
                     min_seconds=0, rotate_order=True)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]


def test_timing_lasts_at_least_min_seconds_and_min_runs():
    started = time.perf_counter()
    samples = time_interleaved({"a": lambda: time.sleep(0.001)}, warmup=0, min_runs=5,
                               min_seconds=0.2)
    assert time.perf_counter() - started >= 0.2
    assert len(samples["a"].seconds) > 5


def test_max_runs_caps_a_very_fast_model():
    samples = time_interleaved({"a": lambda: None}, warmup=0, min_runs=5, min_seconds=60,
                               max_runs=1000)
    assert len(samples["a"].seconds) == 1000


def test_progress_is_reported_while_timing_runs():
    reports = []
    time_interleaved({"a": lambda: time.sleep(0.01)}, warmup=0, min_runs=1, min_seconds=0.35,
                     progress=lambda rounds, elapsed: reports.append((rounds, elapsed)),
                     progress_every=0.1)
    assert len(reports) >= 2
    assert all(r > 0 and e >= 0.1 for r, e in reports)
    assert [r for r, _ in reports] == sorted(r for r, _ in reports)


def test_a_block_is_one_untimed_call_then_consecutive_timed_calls_of_one_model():
    calls, make = recorder()
    samples = time_interleaved({"a": make("a"), "b": make("b")}, warmup=1, min_runs=2,
                               min_seconds=0, rotate_order=True, block_size=3)
    assert calls == ["a", "b"] + ["a"] * 4 + ["b"] * 4 + ["b"] * 4 + ["a"] * 4
    assert len(samples["a"].seconds) == len(samples["b"].seconds) == 6
    assert samples["a"].rounds == 2 and len(samples["a"].round_figures) == 2


def test_a_rounds_figure_is_the_median_of_its_block():
    delays = iter([0.0, 0.001, 0.030, 0.001, 0.001,   # round 1: untimed, then 4 timed
                   0.0, 0.002, 0.002, 0.002, 0.040])  # round 2: one slow call in the block
    samples = time_interleaved({"a": lambda: time.sleep(next(delays))}, warmup=0,
                               min_runs=2, min_seconds=0, block_size=4)
    low, high = samples["a"].round_figures
    assert 0.001 <= low < 0.004 and 0.002 <= high < 0.008  # the slow calls do not count


def test_rounds_count_blocks_for_min_runs_and_max_runs():
    samples = time_interleaved({"a": lambda: None}, warmup=0, min_runs=5, min_seconds=60,
                               max_runs=7, block_size=10)
    assert samples["a"].rounds == 7 and len(samples["a"].seconds) == 70


def test_a_block_size_below_one_is_refused():
    with pytest.raises(ValueError, match="block_size must be at least 1"):
        time_interleaved({"a": lambda: None}, block_size=0)


def test_timing_goes_on_past_the_minimums_until_settled_asking_at_growing_round_counts():
    asked = []

    def settled(samples):
        asked.append(len(samples["a"]))
        return len(samples["a"]) >= 100

    samples = time_interleaved({"a": lambda: None, "b": lambda: None}, warmup=0, min_runs=50,
                               min_seconds=0, settled=settled, max_seconds=60)
    assert asked[0] == 50 and asked[-1] == len(samples["a"].seconds) >= 100
    # a quarter more rounds between two looks, so few looks: 50, 63, 79, 99, 124
    assert asked == [50, 63, 79, 99, 124]


def test_timing_that_never_settles_stops_at_max_seconds():
    started = time.perf_counter()
    samples = time_interleaved({"a": lambda: time.sleep(0.001)}, warmup=0, min_runs=5,
                               min_seconds=0.1, settled=lambda samples: False, max_seconds=0.4)
    elapsed = time.perf_counter() - started
    assert 0.4 <= elapsed < 5 and len(samples["a"].seconds) > 5


def test_without_settled_timing_stops_at_the_minimums():
    samples = time_interleaved({"a": lambda: None}, warmup=0, min_runs=7, min_seconds=0,
                               max_seconds=60)
    assert len(samples["a"].seconds) == 7


def test_blocks_shrink_to_the_calls_that_last_block_seconds_at_the_slowest_model():
    def sleeping(seconds):
        return lambda: time.sleep(seconds)

    fast = [lambda: None, lambda: None]
    assert scaled_block_size(fast, 10, 0.05) == 10
    # the slowest call sets the block: 20 ms -> 3 calls make 50 ms; 60 ms -> one call
    assert scaled_block_size([*fast, sleeping(0.02)], 10, 0.05) in (2, 3)
    assert scaled_block_size([sleeping(0.06), *fast], 10, 0.05) == 1


def spinning_and_watching_models():
    """A model whose runtime's worker spins on after each call (an ONNX Runtime pool), and a
    model whose call records how many other threads of the process are running."""
    from test_benchmark_idle import spinning_session

    from tfopt.optimizer.benchmark.idle import running_threads

    seen: list[int] = []
    return {"spinning": spinning_session(),
            "watching": lambda: seen.append(running_threads())}, seen


def test_a_models_block_starts_only_after_the_previous_models_spinning_worker_stopped():
    """After a block of a model named in wait_idle_after, the next block waits until no other
    thread runs (tfopt.optimizer.benchmark.idle): a runtime whose workers spin ~30 ms after a call
    must not share the cores with the next model's timed calls."""
    calls, seen = spinning_and_watching_models()
    time_interleaved(calls, warmup=0, min_runs=4, min_seconds=0, block_size=2,
                     rotate_order=True, wait_idle_after=["spinning"])
    assert len(seen) == 12  # 4 rounds of one untimed and two timed calls
    assert sum(1 for n in seen if n) <= 1  # a stray thread of the test process may run once


def test_after_a_model_not_named_to_wait_for_the_next_block_runs_beside_its_worker():
    calls, seen = spinning_and_watching_models()
    time_interleaved(calls, warmup=0, min_runs=4, min_seconds=0, block_size=2,
                     rotate_order=True)
    assert sum(1 for n in seen if n) >= 6
