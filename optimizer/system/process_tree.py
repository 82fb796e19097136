"""What a piece of work costs: wall time and the peak resident memory of the whole process tree.

A pod's memory limit counts every process in it, so the figure that matters is the sum of the
resident sets of this process and all its descendants (the worker processes that convert,
probe and time models), not this process's alone. :class:`TreeMeter` samples that sum every
0.2 s on a background thread while a block runs and keeps the peak; a spike shorter than the
interval can be missed, so the peak is a lower bound of the true one, as a pod's own memory
metrics are.

Linux only (``/proc``); elsewhere the figures are None.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from tfopt.optimizer.records import JsonRecord

PROC = Path("/proc")
SAMPLE_SECONDS = 0.2
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _children(proc: Path) -> dict[int, list[int]]:
    """parent pid -> child pids, from every ``/proc/<pid>/stat``."""
    tree: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def _rss_bytes(pid: int, proc: Path) -> int:
    try:
        return int((proc / str(pid) / "statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss_bytes(pid: int | None = None, proc: Path = PROC) -> int | None:
    """Resident bytes of ``pid`` (default: this process) and every descendant; None where
    ``/proc`` is not there."""
    if not (proc / "self").exists():
        return None
    root = os.getpid() if pid is None else pid
    tree = _children(proc)
    total, frontier = 0, [root]
    while frontier:
        current = frontier.pop()
        total += _rss_bytes(current, proc)
        frontier.extend(tree.get(current, ()))
    return total


@dataclass(frozen=True)
class Cost(JsonRecord):
    """Wall time and peak tree RSS of one piece of work (``peak_rss_bytes`` None: unknown)."""

    wall_seconds: float
    peak_rss_bytes: int | None


class TreeMeter:
    """``with TreeMeter() as meter: work()``; then ``meter.cost``. Samples while it runs."""

    def __init__(self, interval: float = SAMPLE_SECONDS, pid: int | None = None):
        self.interval, self.pid = interval, pid
        self.peak: int | None = None
        self.cost: Cost | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True,
                                        name="tree-meter")

    def _sample(self) -> int | None:
        """One reading of the tree, kept in :attr:`peak`; returned for subclasses that act on
        it (:class:`~tfopt.optimizer.system.memory_watchdog.MemoryWatchdog`)."""
        reading = tree_rss_bytes(self.pid)
        if reading is not None:
            self.peak = reading if self.peak is None else max(self.peak, reading)
        return reading

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> Self:
        self._started = time.perf_counter()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.cost = Cost(time.perf_counter() - self._started, self.peak)
