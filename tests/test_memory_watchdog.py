"""The memory watchdog: a worker that takes the process tree over the limit is killed with its
process group, at a figure over the limit; one that stays under it runs to its end."""

import os
import subprocess
import sys
import time

from tfopt.optimizer.system.memory_watchdog import MemoryWatchdog
from tfopt.optimizer.system.process_tree import tree_rss_bytes

MIB = 2**20
# holds argv[1] MiB, 32 at a time every 20 ms (bytes of 1: touched pages, not calloc's zero
# ones), then sleeps argv[2] seconds; SPAWN runs it in a child of its own (the watched
# worker's helper), printing that one's pid
ALLOCATE = ("import sys, time\n"
            "held = []\n"
            "for _ in range(int(sys.argv[1]) // 32):\n"
            "    held.append(b'\\1' * (32 << 20)); time.sleep(0.02)\n"
            "time.sleep(float(sys.argv[2]))\n")
SPAWN = ("import subprocess, sys\n"
         "child = subprocess.Popen([sys.executable, '-c', sys.argv[1], *sys.argv[2:]])\n"
         "print(child.pid, flush=True)\n"
         "child.wait()\n")


def _watched(limit: int, *args: str, spawn: bool = False):
    command = ([sys.executable, "-c", SPAWN, ALLOCATE, *args] if spawn
               else [sys.executable, "-c", ALLOCATE, *args])
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, process_group=0)
    started = time.monotonic()
    with MemoryWatchdog(worker.pid, limit) as watchdog:
        code = worker.wait(timeout=60)
    return watchdog, code, worker, time.monotonic() - started


def test_a_worker_over_the_limit_is_killed_with_its_group_at_a_figure_over_it():
    limit = tree_rss_bytes() + 300 * MIB
    watchdog, code, worker, seconds = _watched(limit, "2048", "60", spawn=True)
    grandchild = int(worker.stdout.readline())
    assert code == -9
    assert watchdog.stopped_at is not None and limit < watchdog.stopped_at < limit + 512 * MIB
    # the allocation in the grandchild counted, and the group's kill took it too
    assert watchdog.worker_peak >= 250 * MIB
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{grandchild}") or _zombie(grandchild)
    assert seconds < 30  # not the 60 s the worker would have slept


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_worker_under_the_limit_runs_to_its_end_and_its_peak_is_measured():
    watchdog, code, _, _ = _watched(tree_rss_bytes() + 1024 * MIB, "128", "0.5")
    assert code == 0
    assert watchdog.stopped_at is None
    assert 128 * MIB <= watchdog.worker_peak < 512 * MIB


def test_of_several_workers_the_one_started_last_is_killed_and_the_others_run_on():
    first = subprocess.Popen([sys.executable, "-c", ALLOCATE, "128", "3"], process_group=0)
    limit = tree_rss_bytes() + 600 * MIB
    with MemoryWatchdog(None, limit) as watchdog:
        watchdog.watch(first.pid)
        time.sleep(0.5)
        last = subprocess.Popen([sys.executable, "-c", ALLOCATE, "2048", "60"], process_group=0)
        watchdog.watch(last.pid)
        assert last.wait(timeout=30) == -9
        assert first.wait(timeout=30) == 0
    assert watchdog.stopped_at_of(first.pid) is None
    assert limit < watchdog.stopped_at_of(last.pid) < limit + 512 * MIB
    assert watchdog.peak_of(first.pid) >= 128 * MIB
