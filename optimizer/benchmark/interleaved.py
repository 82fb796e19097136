"""Time several models in one process, interleaved in blocks (AAAA BBBB AAAA ...), so drift
hits all alike and each model is timed as a serving process runs it.

On a shared, noisy machine two models timed one after the other see different background load;
alternating them spreads that load evenly. But alternating *one call* each is not how any model
is served: between two calls of one model the other models run, its runtime's worker threads
fall asleep and its weights and activations leave the caches, so every timed call pays to wake
them. Runtimes differ a lot in that cost. Measured on the trained digits CNN at batch 1
(``benchmarks/block_timing.py``, one process), one call per model per round timed LiteRT fp32
(1 thread) at 72.6 us; in blocks of ten consecutive calls it took 12.9 us, and 12.6 us timed
alone; its speedup over the stock SavedModel came out 10.0x, 42.9x and 43.7x. So each model
runs a **block** of ``block_size`` consecutive calls per round after one untimed call that pays
for waking it up; the calls of the block are timed. ``block_size=1`` is the plain one-call
interleaving (no untimed call), for callers that time one model or that want it.

Each model is warmed up first (the first calls build kernels and caches), then timed round after
round until both a minimum count of rounds and a minimum duration are reached.

**Idle after a spinning runtime's block.** After a block of a model named in
``wait_idle_after`` (a runner whose workers spin on after a call: ONNX Runtime with a pool, for
~30 ms) the harness waits until no other thread of the process runs
(:func:`tfopt.optimizer.benchmark.idle.wait_for_idle`), or the next model's block would share the cores
with them. Only after those: looking costs ~0.1 ms of system calls, after which the next block of
a TensorFlow model ran 10-15% slower (the digits CNN's stock call, 219 us against 195).

Round ``i`` of every model was taken back to back, so rounds stay paired across models: a paired
statistic (the bootstrap of the latency ratio, :mod:`tfopt.optimizer.benchmark.stats`) resamples whole
rounds, each model's round figure being the median of its block
(:attr:`LatencySamples.round_figures`). With ``rotate_order`` the order within a round rotates
every round (A B C, B C A, C A B, ...; for two models A B, B A), so each model runs in each
position equally often and any advantage of a position (a warm cache, a frequency step) cancels
out too.

**Stopping when the answer is known.** With ``settled``, timing goes on past the minimum while
``settled(samples so far)`` is false (the harness: some candidate's interval still straddles the
promotion threshold, or the gate's choice between the fastest candidate and a more precise one is
unresolved head to head), up to ``max_seconds``. It is asked at rounds growing by a quarter each
time (50, 62, 78, ...), not after every round: each look is one more chance for noise to cross
the threshold, and geometric looks keep their number to a handful (about 12 from 50 to 700
rounds).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.benchmark.idle import wait_for_idle
from tfopt.optimizer.benchmark.stats import round_figures

log = logging.getLogger(__name__)

DEFAULT_BLOCK_SIZE = 10
# a block shrinks to as few calls as last this long (scaled_block_size)
DEFAULT_BLOCK_SECONDS = 0.05
LOOK_GROWTH = 1.25  # rounds grow by this factor between two looks at ``settled``


@dataclass(frozen=True)
class LatencySamples:
    """Every timed call of one model, round after round: ``block_size`` calls per round."""

    name: str
    seconds: tuple[float, ...]
    block_size: int = 1

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.seconds, q))

    @property
    def p50(self) -> float:
        return self.percentile(50)

    @property
    def mean(self) -> float:
        return float(np.mean(self.seconds))

    @property
    def rounds(self) -> int:
        return len(self.seconds) // self.block_size

    @property
    def round_figures(self) -> np.ndarray:
        """One figure per round, paired by index with every other model's: the median of the
        round's block."""
        return round_figures(self.seconds, self.block_size)


def time_interleaved(
    calls: Mapping[str, Callable[[], object]],
    warmup: int = 5,
    min_runs: int = 30,
    min_seconds: float = 2.0,
    max_runs: int = 100_000,
    progress: Callable[[int, float], None] | None = None,
    rotate_order: bool = False,
    progress_every: float = 5.0,
    block_size: int = 1,
    settled: Callable[[Mapping[str, list[float]]], bool] | None = None,
    max_seconds: float = 0.0,
    wait_idle_after: Iterable[str] = (),
) -> dict[str, LatencySamples]:
    """Per round, a block of ``block_size`` timed calls of each function in turn (after one
    untimed call when ``block_size`` > 1); per-call wall times in seconds.

    ``min_runs`` and ``max_runs`` count rounds. ``progress(rounds, elapsed_seconds)`` is called
    about every ``progress_every`` seconds. Once both minimums are reached, timing stops unless
    ``settled`` is given and says no (it gets every model's timed calls so far); then it goes
    on, asking again at geometrically growing round counts, until it says yes or
    ``max_seconds`` have passed.

    ``wait_idle_after``: models after whose block, when other models are timed too, the harness
    waits until no other thread of the process runs (:mod:`tfopt.optimizer.benchmark.idle`), so that
    no model is timed beside their spinning workers. If the threads do not stop within
    :data:`~tfopt.optimizer.benchmark.idle.MAX_WAIT_SECONDS` (a thread of the caller's keeps running),
    waiting is given up for the rest of the timing, with a warning.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    names = list(calls)
    for name in names:
        for _ in range(warmup):
            calls[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    wait_after = set(wait_idle_after) if len(names) > 1 else set()
    started = time.perf_counter()
    rounds, next_report, next_look = 0, started + progress_every, min_runs
    while rounds < max_runs:
        shift = rounds % len(names) if rotate_order else 0
        for name in names[shift:] + names[:shift]:
            call, timed = calls[name], samples[name]
            if block_size > 1:
                call()
            for _ in range(block_size):
                t0 = time.perf_counter()
                call()
                timed.append(time.perf_counter() - t0)
            if name in wait_after:
                waited, idle = wait_for_idle()
                if not idle:
                    log.warning("the process did not go idle %.0f ms after a block of %s: "
                                "another thread keeps running; timing goes on without waiting",
                                waited * 1e3, name)
                    wait_after = set()
        rounds += 1
        now = time.perf_counter()
        if rounds >= min_runs and now - started >= min_seconds:
            if settled is None or now - started >= max_seconds:
                break
            if rounds >= next_look:
                if settled(samples):
                    break
                next_look = max(rounds + 1, math.ceil(rounds * LOOK_GROWTH))
        if progress and now >= next_report:
            progress(rounds, now - started)
            next_report = now + progress_every
    log.debug("timed %d rounds of %d call(s) of %s in %.1fs", rounds, block_size, names,
              time.perf_counter() - started)
    return {name: LatencySamples(name, tuple(s), block_size) for name, s in samples.items()}


def scaled_block_size(calls: Iterable[Callable[[], object]], block_size: int,
                      block_seconds: float) -> int:
    """``block_size``, or as few calls (at least 1) as last ``block_seconds`` at the slowest
    of ``calls`` (bound calls): a block pays for waking a model (tens of microseconds) and
    buys nothing for a call of 100 ms, while every call of it is a round fewer in the same
    time, and the interval narrows with rounds. Measured after two calls to warm up, as the
    fastest of three more: one call that a neighbour preempts must not make a 0.1 ms model look
    slow enough for blocks of one (measured under a load of 20: the convnet's block came out
    1, 2 or 8 instead of 10 in 3 of 20 runs)."""
    slowest = 0.0
    for call in calls:
        for _ in range(2):
            call()
        fastest = math.inf
        for _ in range(3):
            started = time.perf_counter()
            call()
            fastest = min(fastest, time.perf_counter() - started)
        slowest = max(slowest, fastest)
    return int(min(block_size, max(1, math.ceil(block_seconds / slowest))))
