"""A per-model runtime's thread count for the benchmark: the one it would be served with.

TensorFlow's thread pools belong to the process; a LiteRT interpreter (and any runtime whose
``per_model_threads`` is set, :mod:`tfopt.optimizer.runtime.registry`) takes its own count. The
champion runs at the count tuning chose for it, and for a small model that is often 1: a second
thread costs more in handoffs than it saves. Timing every candidate at all CPUs instead would
compare the champion as served with candidates as nobody serves them; measured on the digits
CNN, the champion's own file came out 1.54x slower than itself.

So a candidate in the champion's runtime is timed at the champion's recorded count: like for
like with the model as deployed (measured otherwise: a champion tuned to 2 threads lost 2.8x to
its own file at 1 thread, and a scheduled run would promote a copy of it). Any other candidate
of such a runtime whose count is not given is timed briefly at 1 thread and at all CPUs,
interleaved in blocks of consecutive calls like the benchmark itself
(:mod:`tfopt.optimizer.benchmark.interleaved`; blocks scaled to the call time as the benchmark scales
them, :func:`~tfopt.optimizer.benchmark.interleaved.scaled_block_size`), and benchmarked at all CPUs unless 1 thread is clearly
faster (median of the per-round ratios of block medians below :data:`CLEARLY_FASTER`). Blocks
matter most here: a thread pool woken for a single call between other models' calls is what
one-call interleaving times, and that penalises more threads (LiteRT fp32 on the digits CNN,
``benchmarks/block_timing.py``: called once per round, 101 us at 2 threads and 73 us at 1; in
blocks, 17 us and 13 us; alone, 19 us and 13 us). On a model of a few microseconds the two are
often close and the choice can go either way from run to run; either choice is a setting the
model could be served with. The full search, in
separate processes and with a sign test, still runs on the chosen model after the gate
(:mod:`tfopt.optimizer.runtime_tuning`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from tfopt.optimizer.benchmark.interleaved import (
    DEFAULT_BLOCK_SECONDS,
    DEFAULT_BLOCK_SIZE,
    scaled_block_size,
    time_interleaved,
)
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy

CLEARLY_FASTER = 0.97
WARMUP = 3
MIN_ROUNDS = 10  # of DEFAULT_BLOCK_SIZE calls each: a round's figure is its block's median
MIN_SECONDS = 0.3


def choose_threads(path: str | os.PathLike, signature: str, fmt: str,
                   feeds: Mapping[str, np.ndarray], cpus: int, *,
                   policy: ScanPolicy = DEFAULT_POLICY) -> tuple[int, float | None]:
    """``(thread count, median ratio of 1 thread to all CPUs)``; the ratio is None when there
    was nothing to choose (one CPU). ``policy``: the model scan's, for loading ``path``."""
    from tfopt.optimizer.runtime import load_runner
    from tfopt.optimizer.runtime.call_deadline import timing_deadline

    if cpus <= 1:
        return 1, None
    runners = {n: load_runner(path, signature, format=fmt, num_threads=n, policy=policy)
               for n in (1, cpus)}
    try:
        # each runner's bound call, as the benchmark times it: its inputs packed once, in
        # blocks scaled to the call time as the benchmark's are (ResNet50: one call, not
        # eleven, per round; 10 rounds of blocks of 10 took 1-2 minutes per candidate at load)
        for runner in runners.values():
            runner(feeds)  # a first call under its deadline (tfopt.optimizer.runtime.call_deadline)
        calls = {n: r.bind(r.to_tensors(feeds)) for n, r in runners.items()}
        block_size = scaled_block_size(calls.values(), DEFAULT_BLOCK_SIZE,
                                       DEFAULT_BLOCK_SECONDS)
        with timing_deadline([r.deadline_clock() for r in runners.values()],
                             WARMUP + (block_size + 1) * MIN_ROUNDS, MIN_SECONDS,
                             f"{path} with 1 and {cpus} threads"):
            timed = time_interleaved(calls, warmup=WARMUP, min_runs=MIN_ROUNDS,
                                     min_seconds=MIN_SECONDS, rotate_order=True,
                                     block_size=block_size,
                                     wait_idle_after=[n for n, r in runners.items()
                                                      if r.spins_after_call])
    finally:
        for runner in runners.values():
            runner.close()
    ratio = float(np.median(timed[1].round_figures / timed[cpus].round_figures))
    return threads_for(ratio, cpus), ratio


def threads_for(ratio: float, cpus: int) -> int:
    """1 thread when it took clearly less time than ``cpus`` threads, else ``cpus``."""
    return 1 if ratio < CLEARLY_FASTER else cpus
