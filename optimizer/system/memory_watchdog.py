"""Stop a worker process before it takes the process tree over the memory budget.

An estimate made before a worker starts (:mod:`optimizer.model.footprint`) sees the model's size
on disk, not what a converter, a calibrator or a compiler will make of it: ONNX Runtime's static
quantization of ResNet50 took 5.9 GiB in a worker where 2.5 were estimated. In a pod the kernel
kills the whole container the moment its cgroup crosses its limit, with no word of why; without
a cgroup, the machine swaps or its OOM killer picks a victim. So while a worker runs,
:class:`MemoryWatchdog` samples the resident memory of this process's tree (this process, the
worker and their descendants: what a pod's limit counts) every 0.2 s, and when it crosses the
limit kills the worker's process group with SIGKILL, the one way to stop a process mid-allocation
that cannot be caught. The caller then knows the worker was stopped, at what figure, and goes on
without its result.

The limit is crossed by at most what the worker allocates in one interval, so it is set at the
budget itself: a pod's limit leaves no room above it, and a spike shorter than the interval is
missed (as :class:`~optimizer.system.process_tree.TreeMeter` misses it).

Generic: the candidate builds use it (:mod:`optimizer.candidates.worker` through
:func:`optimizer.system.worker_process.run_job`); any worker started in its own process group
(``start_new_session`` or ``process_group=0``) can be watched.
"""

from __future__ import annotations

import os
import signal

from optimizer.system.process_tree import SAMPLE_SECONDS, TreeMeter, tree_rss_bytes


class MemoryWatchdog(TreeMeter):
    """``with MemoryWatchdog(worker_pid, limit_bytes): worker.wait()``; then
    :attr:`stopped_at` (the tree's bytes when the worker was killed, None if it never was),
    :attr:`worker_peak` (the worker's own tree's peak, None where ``/proc`` is missing) and,
    as a :class:`~optimizer.system.process_tree.TreeMeter` of ``root``, ``peak`` and ``cost``.

    ``worker_pid`` must lead its own process group: the whole group is killed, so that a
    converter's helper processes go with it. ``root`` is the tree measured against the limit
    (default: this process)."""

    def __init__(self, worker_pid: int, limit_bytes: int, *, root: int | None = None,
                 interval: float = SAMPLE_SECONDS):
        super().__init__(interval, pid=os.getpid() if root is None else root)
        self.worker_pid, self.limit_bytes = worker_pid, limit_bytes
        self.stopped_at: int | None = None
        self.worker_peak: int | None = None

    def _sample(self) -> int | None:
        tree = super()._sample()
        if tree is None or self.stopped_at is not None:
            return tree
        worker = tree_rss_bytes(self.worker_pid)
        if worker is None:  # exited: nothing more to watch
            return tree
        self.worker_peak = max(self.worker_peak or 0, worker)
        if tree > self.limit_bytes:
            try:
                os.killpg(self.worker_pid, signal.SIGKILL)
            except ProcessLookupError:  # exited between the reading and the kill
                return tree
            self.stopped_at = tree
            self._stop.set()
        return tree
