"""How many probe processes the memory budget holds.

Each probe process holds TensorFlow's runtime and the model, and they are alive at once, so the
thread search sizes them against the memory budget in two steps:

1. Up front, from the model on disk: one probe's load estimate (:func:`probe_bytes`, as a
   benchmark group of one model is estimated). When not even one fits beside this process tree,
   tuning is refused in one line before any probe starts (:func:`require_one_probe`).
2. The reference probe then starts alone. Once it has loaded the model and called it once, its
   high-water mark (``VmHWM``) is what a probe costs, measured rather than estimated: the
   estimate reads the format, not the variant, and put a bf16 ResNet50's probe ~35% low, so
   four probes peaked at 6.3 GiB where 4.7 were estimated. As many more start as fit in what is
   left of the budget beside the tree as it is now (the reference included), each counted at
   that peak plus :data:`PROBE_MARGIN` (:func:`probes_beside`).

Every probe also runs under a :class:`~tfopt.optimizer.system.memory_watchdog.MemoryWatchdog`
(:mod:`.probes`), which stops one that takes the tree over the budget all the same.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.runtime_tuning.checks import RuntimeTuningError
from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget

# Over the reference's measured peak, per probe. The other settings run no more threads than
# the reference (all CPUs), so they peak at or below it; the margin covers a load's
# run-to-run spread and several probes loading at once on busy cores.
PROBE_MARGIN = 0.15


def probe_bytes(model: str | os.PathLike) -> int:
    """The estimated peak of one probe process holding ``model``: a process's runtime plus
    the model's load (what it keeps, and its load's transient), as a benchmark group of one
    model is estimated (:mod:`tfopt.optimizer.benchmark.memory_groups`)."""
    from tfopt.optimizer.model.footprint import PROCESS_BYTES, LoadCost, group_bytes
    from tfopt.optimizer.runtime.registry import detect_format

    return PROCESS_BYTES + group_bytes([LoadCost.of(model, detect_format(model))])


def _room(budget: MemoryBudget) -> int:
    """What is left of ``budget`` beside this process tree now."""
    from tfopt.optimizer.system.process_tree import tree_rss_bytes

    return budget.bytes - (tree_rss_bytes() or 0)


def require_one_probe(model: str | os.PathLike, budget: MemoryBudget) -> None:
    """Refuse, in one line, when not even one probe fits ``budget`` by its load estimate."""
    one, room = probe_bytes(model), _room(budget)
    if one > room:
        raise RuntimeTuningError(
            f"a probe process holding the model needs an estimated {one / GIB:.1f} GiB, more "
            f"than the {max(room, 0) / GIB:.1f} GiB left of the memory budget of "
            f"{budget.describe()}")


def process_peak_bytes(pid: int) -> int | None:
    """``VmHWM`` of process ``pid``: the most it has held; None where ``/proc`` is missing."""
    from tfopt.optimizer.benchmark.memory import read_rss

    reading = read_rss(Path(f"/proc/{pid}/status"))
    return reading.peak_bytes if reading else None


@dataclass(frozen=True)
class ProbeRoom:
    """How many more probes fit: ``count`` of ``per_probe`` bytes in ``room`` bytes."""

    count: int
    per_probe: int
    room: int

    def describe(self, peak: int, budget: MemoryBudget) -> str:
        return (f"the reference probe peaked at {peak / GIB:.2f} GiB; at that plus "
                f"{PROBE_MARGIN:.0%} ({self.per_probe / GIB:.2f} GiB) each, {self.count} more "
                f"fit in the {max(self.room, 0) / GIB:.2f} GiB left of the memory budget of "
                f"{budget.describe()}")


def probes_beside(peak: int, budget: MemoryBudget) -> ProbeRoom:
    """How many more probes of the reference's measured ``peak`` fit ``budget`` beside this
    process tree (the reference in it)."""
    per_probe, room = math.ceil(peak * (1 + PROBE_MARGIN)), _room(budget)
    return ProbeRoom(max(room // per_probe, 0), per_probe, room)
