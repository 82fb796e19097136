"""The thread search: each setting of the grid timed at batch 1 in its own probe process.

Rounds interleave the settings (order rotating by round); each setting's p50 is divided by the
reference's p50 from the same round, and a setting's score is the median ratio over rounds. A
setting replaces the reference only if it is faster by ``min_gain`` and in enough rounds to
pass a one-sided sign test at 5% (see :mod:`tfopt.optimizer.runtime_tuning`).
"""

from __future__ import annotations

import logging
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import computed_field

from tfopt.optimizer.errors import SourceNotFoundError
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.records import JsonRecord
from tfopt.optimizer.runtime_tuning.checks import ProbeStopped, check_min_gain, positive
from tfopt.optimizer.runtime_tuning.grid import (
    ThreadSetting,
    cpu_facts,
    has_per_model_threads,
    reference_setting,
    thread_grid,
    validate_grid,
)
from tfopt.optimizer.runtime_tuning.probes import Probe, Probes, Progress
from tfopt.optimizer.runtime_tuning.settings import (
    DEFAULT_MIN_GAIN,
    DEFAULT_ROUNDS,
    DEFAULT_SECONDS_PER_PROBE,
)

log = logging.getLogger(__name__)

SIGN_TEST_LEVEL = 0.05


@dataclass(frozen=True)
class ThreadProbe(JsonRecord):
    """One setting's figures: per-round batch-1 p50s and ratios to the reference's."""

    setting: ThreadSetting
    in_effect: dict  # what the worker's runtime reported: intra/inter-op threads, num_threads
    p50_seconds: tuple[float, ...]
    ratios: tuple[float, ...]

    @property
    def median_p50(self) -> float:
        return statistics.median(self.p50_seconds)

    # The figures below are written with the samples they come from (read back, they are
    # recomputed).
    @computed_field
    @property
    def median_p50_ms(self) -> float:
        return self.median_p50 * 1e3

    @computed_field
    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    @computed_field
    @property
    def wins(self) -> int:
        """Rounds in which this setting was faster than the reference."""
        return sum(r < 1 for r in self.ratios)

    @computed_field
    @property
    def sign_test_p(self) -> float:
        """P(at least ``wins`` wins in these rounds) if neither setting were faster."""
        n = len(self.ratios)
        return sum(math.comb(n, k) for k in range(self.wins, n + 1)) / 2 ** n


@dataclass(frozen=True)
class ThreadSearch:
    probes: tuple[ThreadProbe, ...]
    reference: ThreadSetting
    best: ThreadSetting
    rounds: int
    seconds_per_probe: float
    min_gain: float

    def probe(self, setting: ThreadSetting) -> ThreadProbe:
        return next(p for p in self.probes if p.setting == setting)


def choose_setting(probes: Sequence[ThreadProbe], reference: ThreadSetting,
                   min_gain: float = DEFAULT_MIN_GAIN) -> ThreadProbe:
    """The reference's probe, unless another setting is faster by ``min_gain`` (median ratio)
    and in enough rounds to pass the sign test; then the fastest such (fewer threads on a tie)."""
    better = [p for p in probes if p.setting != reference and p.median_ratio < 1 - min_gain
              and p.sign_test_p <= SIGN_TEST_LEVEL]
    if better:
        return min(better, key=lambda p: (p.median_ratio, p.setting.total_threads))
    return next(p for p in probes if p.setting == reference)


def run_search(running: dict[ThreadSetting, Probe], reference: ThreadSetting, rounds: int,
               seconds_per_probe: float, min_gain: float, say: Progress) -> ThreadSearch:
    """The rounds, on probes already started: ``running`` maps each setting to its probe. One
    the memory watchdog stops is left out of the result, named in one line; the reference's
    stop ends the search."""
    settings = list(running)
    p50s: dict[ThreadSetting, list[float]] = {s: [] for s in settings}
    ratios: dict[ThreadSetting, list[float]] = {s: [] for s in settings}
    for round_index in range(rounds):
        shift = round_index % len(settings)
        this_round = {}
        for setting in settings[shift:] + settings[:shift]:
            try:
                this_round[setting] = running[setting].measure(1, seconds_per_probe)["p50"]
            except ProbeStopped as stopped:
                if setting == reference:
                    raise
                say(f"thread setting [{setting.label}] left out: {stopped.reason}")
                settings.remove(setting)
        for setting, p50 in this_round.items():
            p50s[setting].append(p50)
            ratios[setting].append(p50 / this_round[reference])
        say(f"thread search round {round_index + 1}/{rounds}: " + ", ".join(
            f"[{s.label}] {p * 1e3:.2f}ms" for s, p in this_round.items()))
    probes = tuple(ThreadProbe(s, running[s].ready.get("in_effect", {}), tuple(p50s[s]),
                               tuple(ratios[s])) for s in settings)
    best = choose_setting(probes, reference, min_gain)
    say(f"thread search: best [{best.setting.label}] (median ratio to [{reference.label}] "
        f"{best.median_ratio:.3f}, faster in {best.wins}/{rounds} rounds)")
    return ThreadSearch(probes, reference, best.setting, rounds, seconds_per_probe, min_gain)


def prepare(model, signature: str, grid, reference, policy: ScanPolicy
            ) -> tuple[str, list[ThreadSetting], ThreadSetting, int]:
    """Check everything that can be checked here, before starting any probe process."""
    from tfopt.optimizer.runtime import read_signature

    if not Path(model).exists():
        raise SourceNotFoundError(f"no such model: {model}")
    read_signature(model, signature, policy=policy)  # not a model, or no such signature
    cpus, _, _ = cpu_facts()
    per_model = has_per_model_threads(model)
    grid = list(grid) if grid is not None else thread_grid(cpus, per_model)
    reference = reference or reference_setting(cpus, per_model)
    validate_grid(grid, reference, cpus, per_model)
    return str(model), grid, reference, cpus


def search_threads(
    model: str | os.PathLike,
    signature: str = DEFAULT_SIGNATURE,
    grid: Sequence[ThreadSetting] | None = None,
    reference: ThreadSetting | None = None,
    rounds: int = DEFAULT_ROUNDS,
    seconds_per_probe: float = DEFAULT_SECONDS_PER_PROBE,
    min_gain: float = DEFAULT_MIN_GAIN,
    progress: Progress | None = None,
    *,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> ThreadSearch:
    """Time ``model`` at batch 1 under each thread setting (see the module docstring); every
    probe reads it under ``policy``, the model scan's."""
    say = progress or (lambda message: log.info("%s", message))
    positive("rounds", rounds)
    positive("seconds_per_probe", seconds_per_probe, float)
    check_min_gain(min_gain)
    model, grid, reference, _ = prepare(model, signature, grid, reference, policy)
    with Probes(model, signature, grid, say, policy, reference=reference) as running:
        return run_search(running, reference, rounds, seconds_per_probe, min_gain, say)
