"""Probe processes: one per thread setting, each holding the model loaded under its setting.

TensorFlow fixes its thread pools when its runtime starts, so a setting can only be measured in
a process started for it. :class:`Probes` starts one ``python -m optimizer.runtime_tuning.worker``
per setting (concurrently: loading is the slow part), waits until each has loaded the model,
called it once and reported the setting in effect, and refuses a probe whose setting did not
take. Then ``probe.measure(batch_size, seconds)`` asks one process for the p50 of timed calls;
the others stay idle on their pipe, so only one runs the model at a time (the protocol:
:mod:`optimizer.system.worker_process`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

from optimizer.files.records import record_to_dict
from optimizer.model.op_scan import ScanPolicy
from optimizer.runtime_tuning.checks import RuntimeTuningError
from optimizer.runtime_tuning.grid import ThreadSetting, serving_env
from optimizer.system.worker_process import WorkerProcess

# Generous: loading ResNet50 in several processes at once on two busy cores takes minutes.
WORKER_START_TIMEOUT = 600.0
PROBE_WARMUP = 2
PROBE_MIN_RUNS = 3

Progress = Callable[[str], None]


class Probe:
    """One worker process holding the model loaded under one thread setting."""

    def __init__(self, model: str, signature: str, setting: ThreadSetting, policy: ScanPolicy):
        self.setting = setting
        self.ready: dict = {}
        # the model scan's policy is part of the worker's arguments: it reads the model too
        config = {"model": model, "signature": signature, "setting": setting.to_dict(),
                  "policy": record_to_dict(policy)}
        self.worker = WorkerProcess(
            "optimizer.runtime_tuning.worker", [json.dumps(config)],
            name=f"probe [{setting.label}]",
            env=serving_env(setting) if setting.intra_op_threads is not None else None,
            error=RuntimeTuningError)

    def receive(self, timeout: float) -> dict:
        return self.worker.receive(timeout)

    def measure(self, batch_size: int, seconds: float, min_runs: int = PROBE_MIN_RUNS,
                warmup: int = PROBE_WARMUP, timeout: float | None = None) -> dict:
        """``{"p50": seconds, "runs": n}`` of ``batch_size`` calls timed for ``seconds``."""
        command = {"batch_size": batch_size, "seconds": seconds, "min_runs": min_runs,
                   "warmup": warmup}
        return self.worker.request(command, timeout or WORKER_START_TIMEOUT + 10 * seconds)

    def release(self) -> None:
        self.worker.release()

    def close(self) -> None:
        self.worker.close()


def close_all(workers: Sequence[Probe]) -> None:
    # EOF to all first, so that their shutdowns overlap.
    for worker in workers:
        worker.release()
    for worker in workers:
        worker.close()


class Probes:
    """Start one worker per setting (concurrently) and wait until all have the model loaded."""

    def __init__(self, model: str, signature: str, settings: Sequence[ThreadSetting],
                 say: Progress, policy: ScanPolicy):
        self.model, self.signature, self.settings, self.say = model, signature, settings, say
        self.policy = policy
        self.by_setting: dict[ThreadSetting, Probe] = {}

    def __enter__(self) -> dict[ThreadSetting, Probe]:
        started = time.monotonic()
        self.say(f"starting {len(self.settings)} probe process(es) for {self.model}")
        try:
            for setting in self.settings:
                self.by_setting[setting] = Probe(self.model, self.signature, setting,
                                                 self.policy)
            for setting, worker in self.by_setting.items():
                remaining = WORKER_START_TIMEOUT - (time.monotonic() - started)
                worker.ready = worker.receive(max(remaining, 1.0))
                _check_in_effect(setting, worker.ready)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.say(f"probes ready in {time.monotonic() - started:.1f}s")
        return self.by_setting

    def __exit__(self, *exc_info) -> None:
        close_all(self.by_setting.values())


def _check_in_effect(setting: ThreadSetting, ready: dict) -> None:
    """A probe that did not get its setting would measure something else: refuse it."""
    for name in ("intra_op_threads", "inter_op_threads", "num_threads"):
        wanted = getattr(setting, name)
        if wanted is not None and ready.get(name) != wanted:
            raise RuntimeTuningError(f"probe [{setting.label}] ran with {name}="
                                     f"{ready.get(name)}, not {wanted}")
