"""Wait until this process's threads stop running between two models' blocks of calls.

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
model, so the benchmark waits for the process to go idle between blocks
(:func:`optimizer.benchmark.interleaved.time_interleaved`).
"""

from __future__ import annotations

import time

WINDOW_SECONDS = 0.0005
# a window in which the process used less CPU than this share of it counts as idle: the
# calling thread's own wake-up and a sampler thread's tick stay well under it
IDLE_SHARE = 0.2
MAX_WAIT_SECONDS = 0.2


def wait_for_idle(window: float = WINDOW_SECONDS, max_seconds: float = MAX_WAIT_SECONDS,
                  idle_share: float = IDLE_SHARE) -> tuple[float, bool]:
    """Sleep in ``window``-second steps until one step in which the process's other threads
    used less than ``idle_share`` of it in CPU time, or ``max_seconds`` have passed.

    Returns ``(seconds waited, whether the process went idle)``."""
    started = time.perf_counter()
    while True:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(window)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        waited = time.perf_counter() - started
        if cpu < idle_share * wall:
            return waited, True
        if waited >= max_seconds:
            return waited, False
