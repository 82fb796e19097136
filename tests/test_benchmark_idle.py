"""Waiting for the process to go idle: a thread that spins after a call is waited for, a quiet
process is not, and a thread that never stops ends the wait at its cap."""

import threading
import time

from optimizer.benchmark.idle import wait_for_idle


def spin_for(seconds: float) -> threading.Thread:
    def spin():
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:
            pass

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    return thread


def test_a_quiet_process_is_idle_after_one_short_window():
    waited, idle = wait_for_idle()
    assert idle
    assert waited < 0.05


def test_a_thread_spinning_after_a_call_is_waited_for_until_it_stops():
    spinner = spin_for(0.06)
    waited, idle = wait_for_idle(max_seconds=2.0)
    assert idle
    assert not spinner.is_alive()
    assert waited >= 0.04


def test_a_thread_that_keeps_running_ends_the_wait_at_its_cap_as_not_idle():
    spinner = spin_for(1.0)
    waited, idle = wait_for_idle(max_seconds=0.1)
    assert not idle
    assert 0.1 <= waited < 0.6
    spinner.join()
