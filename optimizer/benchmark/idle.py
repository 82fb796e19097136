"""Wait until this process's other threads stop running between two models' blocks of calls.

Some runtimes keep their worker threads spinning on the cores after a call returns, waiting for
more work instead of sleeping. Measured here after blocks of ten batch-1 calls, as CPU time this
process used during a sleep of the calling thread (``time.process_time``):
- ONNX Runtime at 2 threads with spinning on (its default): one worker spins for ~30 ms (the
  BiLSTM tagger: 20 ms of CPU in a 20 ms sleep, 33 ms in 50 ms, 30 ms in 300 ms);
- LiteRT (XNNPACK) and OpenVINO at 2 threads: 1.1-1.7 ms (MobileNetV2);
- TensorFlow: none (0.03-0.1 ms whatever the sleep).

When models are timed interleaved in one process, the next model's calls would share the
cores with that spinning thread, and its time would be charged for another model's idling
(TensorFlow's BiLSTM, whose loop runs on two inter-op threads, most of all). A server runs one
model, so after a block of a runner that says it spins (``ModelRunner.spins_after_call``) the
benchmark waits until no other thread of the process is running
(:func:`tfopt.optimizer.benchmark.interleaved.time_interleaved`).

How it knows: each thread's state in ``/proc/self/task/*/stat`` (``R``: running), read at once.
CPU time cannot tell within a millisecond: the kernel adds a running thread's time on another
core to the process's clock at its scheduler tick (a spinning ONNX Runtime worker showed no CPU
time in windows of 0.5 and 1 ms, and all of it from 2 ms on). The calling thread waits busy
between two looks, as a serving loop polls: asleep, it let its core idle, and the next call
paid for it (the digits CNN's stock call between LiteRT blocks: 205-228 us after a 0.5 ms
sleep against 172-198 us with none). Where ``/proc`` cannot be read, nothing is waited for.
"""

from __future__ import annotations

import os
import threading
import time

TASKS = "/proc/self/task"
POLL_SECONDS = 0.0002
MAX_WAIT_SECONDS = 0.2


def running_threads() -> int | None:
    """How many of this process's threads other than the caller are running now, or None
    where ``/proc`` cannot say."""
    own = str(threading.get_native_id())
    try:
        tasks = os.listdir(TASKS)
    except OSError:
        return None
    running = 0
    for task in tasks:
        if task == own:
            continue
        try:
            with open(f"{TASKS}/{task}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        # "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the
        # last ")"
        end = stat.rfind(b")")
        if stat[end + 2:end + 3] == b"R":
            running += 1
    return running


def wait_for_idle(max_seconds: float = MAX_WAIT_SECONDS,
                  poll: float = POLL_SECONDS) -> tuple[float, bool]:
    """Wait busy until no other thread of the process is running, or ``max_seconds`` have
    passed. Returns ``(seconds waited, whether the other threads went idle)``; ``(0, True)``
    where ``/proc`` cannot say."""
    started = time.perf_counter()
    while True:
        running = running_threads()
        waited = time.perf_counter() - started
        if not running:
            return waited, True
        if waited >= max_seconds:
            return waited, False
        until = time.perf_counter() + poll
        while time.perf_counter() < until:
            pass
