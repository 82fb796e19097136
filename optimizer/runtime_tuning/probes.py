"""Probe processes: one per thread setting, each holding the model loaded under its setting.

TensorFlow fixes its thread pools when its runtime starts, so a setting can only be measured in
a process started for it. :class:`Probes` starts one ``python -m tfopt.optimizer.runtime_tuning.worker``
per setting, waits until each has loaded the model, called it once and reported the setting in
effect, and refuses a probe whose setting did not take. Then ``probe.measure(batch_size,
seconds)`` asks one process for the p50 of timed calls; the others stay idle on their pipe, so
only one runs the model at a time (the protocol: :mod:`tfopt.optimizer.system.worker_process`).

The probes keep the memory budget (:mod:`.budget`): the reference starts alone, and the others
(concurrently: loading is the slow part) only as many as fit beside it by its measured peak.
All of them run under a :class:`~tfopt.optimizer.system.memory_watchdog.MemoryWatchdog`: a probe that
takes the process tree over the budget is killed, and its setting left out with "stopped at X
GiB, over the memory budget of Y GiB" (the reference's: tuning is refused in that line).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

from tfopt.optimizer.model.op_scan import ScanPolicy
from tfopt.optimizer.records import record_to_dict
from tfopt.optimizer.runtime_tuning.budget import probes_beside, process_peak_bytes
from tfopt.optimizer.runtime_tuning.checks import ProbeStopped, RuntimeTuningError
from tfopt.optimizer.runtime_tuning.grid import ThreadSetting, serving_env
from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget
from tfopt.optimizer.system.memory_watchdog import MemoryWatchdog
from tfopt.optimizer.system.worker_process import WorkerProcess

# Generous: loading ResNet50 in several processes at once on two busy cores takes minutes.
WORKER_START_TIMEOUT = 600.0
PROBE_WARMUP = 2
PROBE_MIN_RUNS = 3
WORKER_MODULE = "tfopt.optimizer.runtime_tuning.worker"

Progress = Callable[[str], None]


class Probe:
    """One worker process holding the model loaded under one thread setting, watched by
    ``watchdog`` (which it leads a process group for)."""

    def __init__(self, model: str, signature: str, setting: ThreadSetting, policy: ScanPolicy,
                 watchdog: MemoryWatchdog, budget: MemoryBudget):
        self.setting, self.watchdog, self.budget = setting, watchdog, budget
        self.ready: dict = {}
        # the model scan's policy is part of the worker's arguments: it reads the model too
        config = {"model": model, "signature": signature, "setting": setting.to_dict(),
                  "policy": record_to_dict(policy)}
        self.worker = WorkerProcess(
            WORKER_MODULE, [json.dumps(config)], name=f"probe [{setting.label}]",
            env=serving_env(setting) if setting.intra_op_threads is not None else None,
            error=RuntimeTuningError, own_group=True)
        self.pid = self.worker.process.pid
        watchdog.watch(self.pid)

    def _answer(self, call: Callable[[], dict]) -> dict:
        """``call()``'s answer; a probe the watchdog killed is :class:`ProbeStopped`."""
        try:
            return call()
        except RuntimeTuningError:
            stopped = self.watchdog.stopped_at_of(self.pid)
            if stopped is None:
                raise
            raise ProbeStopped(self.worker.name, f"stopped at {stopped / GIB:.2f} GiB, over the "
                               f"memory budget of {self.budget.describe()}") from None

    def receive(self, timeout: float) -> dict:
        return self._answer(lambda: self.worker.receive(timeout))

    def measure(self, batch_size: int, seconds: float, min_runs: int = PROBE_MIN_RUNS,
                warmup: int = PROBE_WARMUP, timeout: float | None = None) -> dict:
        """``{"p50": seconds, "runs": n}`` of ``batch_size`` calls timed for ``seconds``."""
        command = {"batch_size": batch_size, "seconds": seconds, "min_runs": min_runs,
                   "warmup": warmup}
        return self._answer(lambda: self.worker.request(
            command, timeout or WORKER_START_TIMEOUT + 10 * seconds))

    def release(self) -> None:
        self.worker.release()

    def close(self) -> None:
        self.worker.close()
        self.watchdog.forget(self.pid)


def close_all(workers: Sequence[Probe]) -> None:
    # EOF to all first, so that their shutdowns overlap.
    for worker in workers:
        worker.release()
    for worker in workers:
        worker.close()


class Probes:
    """``with Probes(...) as running``: ``running`` maps each setting that started to its probe,
    loaded and ready, in the order of ``settings``. The ``reference`` (default: the first)
    starts alone; the others, in their order, as many as fit ``budget`` (default
    :func:`~tfopt.optimizer.system.memory_budget.memory_budget`) by its measured peak
    (:mod:`.budget`), the rest named in one line; a probe the watchdog stops is left out,
    named with its figure."""

    def __init__(self, model: str, signature: str, settings: Sequence[ThreadSetting],
                 say: Progress, policy: ScanPolicy, budget: MemoryBudget | None = None, *,
                 reference: ThreadSetting | None = None):
        from tfopt.optimizer.system.memory_budget import memory_budget

        self.model, self.signature, self.settings, self.say = model, signature, settings, say
        self.policy, self.budget = policy, budget or memory_budget()
        self.reference = reference or settings[0]
        self.by_setting: dict[ThreadSetting, Probe] = {}
        self.watchdog = MemoryWatchdog(None, self.budget.bytes)

    def __enter__(self) -> dict[ThreadSetting, Probe]:
        started = time.monotonic()
        reference = self.reference
        others = [s for s in self.settings if s != reference]
        self.watchdog.__enter__()
        try:
            self.say(f"starting the probe process for [{reference.label}] alone"
                     + (": the others are sized from its peak" if others else ""))
            self._start([reference], started)
            peak = process_peak_bytes(self.by_setting[reference].pid)
            if others and peak is not None:
                room = probes_beside(peak, self.budget)
                if room.count < len(others):
                    left_out = others[room.count:]
                    others = others[:room.count]
                    self.say(f"thread settings {', '.join(s.label for s in left_out)} left "
                             f"out: {room.describe(peak, self.budget)}")
            if others:
                self.say(f"starting {len(others)} more probe process(es)")
                self._start(others, started)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.say(f"probes ready in {time.monotonic() - started:.1f}s")
        self.by_setting = {s: self.by_setting[s] for s in self.settings if s in self.by_setting}
        return self.by_setting

    def _start(self, settings: Sequence[ThreadSetting], started: float) -> None:
        """Start ``settings`` at once and wait until each is ready; one the watchdog stops is
        left out (the reference alone: raised)."""
        probes = {s: Probe(self.model, self.signature, s, self.policy, self.watchdog,
                           self.budget) for s in settings}
        self.by_setting.update(probes)
        for setting, probe in probes.items():
            remaining = WORKER_START_TIMEOUT - (time.monotonic() - started)
            try:
                probe.ready = probe.receive(max(remaining, 1.0))
            except ProbeStopped as stopped:
                del self.by_setting[setting]
                probe.close()
                if setting == self.reference:
                    raise
                self.say(f"thread setting [{setting.label}] left out: {stopped.reason}")
                continue
            _check_in_effect(setting, probe.ready)

    def __exit__(self, *exc_info) -> None:
        try:
            close_all(self.by_setting.values())
        finally:
            self.watchdog.__exit__(None, None, None)


def _check_in_effect(setting: ThreadSetting, ready: dict) -> None:
    """A probe that did not get its setting would measure something else: refuse it."""
    for name in ("intra_op_threads", "inter_op_threads", "num_threads"):
        wanted = getattr(setting, name)
        if wanted is not None and ready.get(name) != wanted:
            raise RuntimeTuningError(f"probe [{setting.label}] ran with {name}="
                                     f"{ready.get(name)}, not {wanted}")
