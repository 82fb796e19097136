"""Stop a worker process before it takes the process tree over the memory budget.

An estimate made before a worker starts (:mod:`tfopt.optimizer.model.footprint`) sees the model's size
on disk, not what a converter, a calibrator or a compiler will make of it: ONNX Runtime's static
quantization of ResNet50 took 5.9 GiB in a worker where 2.5 were estimated. In a pod the kernel
kills the whole container the moment its cgroup crosses its limit, with no word of why; without
a cgroup, the machine swaps or its OOM killer picks a victim. So while workers run,
:class:`MemoryWatchdog` samples the resident memory of this process's tree (this process, the
workers and their descendants: what a pod's limit counts) every 0.2 s, and when it crosses the
limit kills a worker's process group with SIGKILL, the one way to stop a process mid-allocation
that cannot be caught. The caller then knows which worker was stopped, at what figure, and goes
on without its result.

With several workers watched at once (runtime tuning's probes), the one started last is killed
first: it is the one the budget had least room for, and the first (the reference the others are
measured against) is kept longest. Once one is killed, the next decision waits until its memory
is gone, so that one crossing does not cost two workers.

The limit is crossed by at most what the workers allocate in one interval, so it is set at the
budget itself: a pod's limit leaves no room above it, and a spike shorter than the interval is
missed (as :class:`~tfopt.optimizer.system.process_tree.TreeMeter` misses it).

Generic: the candidate builds use it (:mod:`tfopt.optimizer.candidates.worker` through
:func:`tfopt.optimizer.system.worker_process.run_job`), and so do runtime tuning's probes
(:mod:`tfopt.optimizer.runtime_tuning.probes`); any worker started in its own process group
(``start_new_session`` or ``process_group=0``) can be watched.
"""

from __future__ import annotations

import os
import signal
import threading

from tfopt.optimizer.system.process_tree import SAMPLE_SECONDS, TreeMeter, tree_rss_bytes


class MemoryWatchdog(TreeMeter):
    """``with MemoryWatchdog(worker_pid, limit_bytes): worker.wait()``; then
    :attr:`stopped_at` (the tree's bytes when the worker was killed, None if it never was),
    :attr:`worker_peak` (the worker's own tree's peak, None where ``/proc`` is missing) and,
    as a :class:`~tfopt.optimizer.system.process_tree.TreeMeter` of ``root``, ``peak`` and ``cost``.

    ``worker_pid`` None watches no worker yet: :meth:`watch` adds each one as it starts, and
    :meth:`stopped_at_of` / :meth:`peak_of` say what became of it. Every worker must lead its own
    process group: the whole group is killed, so that a converter's helper processes go with
    it. ``root`` is the tree measured against the limit (default: this process)."""

    def __init__(self, worker_pid: int | None, limit_bytes: int, *, root: int | None = None,
                 interval: float = SAMPLE_SECONDS):
        super().__init__(interval, pid=os.getpid() if root is None else root)
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()
        self._workers: list[int] = []  # in the order they were watched
        self._peaks: dict[int, int] = {}
        self._stopped: dict[int, int] = {}  # pid -> the tree's bytes when it was killed
        if worker_pid is not None:
            self.watch(worker_pid)

    def watch(self, pid: int) -> None:
        with self._lock:
            self._workers.append(pid)

    def forget(self, pid: int) -> None:
        """Stop watching ``pid``, once it has been waited for (its number may be reused)."""
        with self._lock:
            if pid in self._workers:
                self._workers.remove(pid)

    def stopped_at_of(self, pid: int) -> int | None:
        return self._stopped.get(pid)

    def peak_of(self, pid: int) -> int | None:
        return self._peaks.get(pid)

    @property
    def stopped_at(self) -> int | None:
        """The tree's bytes when a worker was first killed (None: none was)."""
        return next(iter(self._stopped.values()), None)

    @property
    def worker_peak(self) -> int | None:
        """The largest peak of a worker's own tree (None: none measured)."""
        return max(self._peaks.values(), default=None)

    def _sample(self) -> int | None:
        tree = super()._sample()
        if tree is None:
            return tree
        with self._lock:
            live = []
            for pid in self._workers:
                if pid in self._stopped:
                    continue
                worker = tree_rss_bytes(pid)
                if worker:  # None: exited; 0: a zombie
                    self._peaks[pid] = max(self._peaks.get(pid, 0), worker)
                    live.append(pid)
            if tree <= self.limit_bytes or not live or self._dying():
                return tree
            victim = live[-1]
            try:
                os.killpg(victim, signal.SIGKILL)
            except ProcessLookupError:  # exited between the reading and the kill
                return tree
            self._stopped[victim] = tree
        return tree

    def _dying(self) -> bool:
        """A killed worker still holds memory: the kernel is taking it back."""
        return any(tree_rss_bytes(pid) for pid in self._stopped if pid in self._workers)
