"""The cost meter: wall time and the peak resident memory of a process and its children."""

import subprocess
import sys
import time

from tfopt.optimizer.system.process_tree import TreeMeter, tree_rss_bytes

HOLD = ("import sys, time; block = bytearray(int(sys.argv[1])); "
        "block[::4096] = b'x' * len(block[::4096]); print('ready', flush=True); "
        "time.sleep(float(sys.argv[2]))")


def test_the_tree_counts_a_childs_memory():
    alone = tree_rss_bytes()
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(300 * 2**20), "30"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        with_child = tree_rss_bytes()
    finally:
        child.kill()
        child.wait()
    assert with_child - alone > 300 * 2**20  # the child's 300 MiB, plus its interpreter


def test_the_meter_keeps_the_peak_of_a_child_that_came_and_went():
    with TreeMeter(interval=0.05) as meter:
        before = tree_rss_bytes()
        subprocess.run([sys.executable, "-c", HOLD, str(200 * 2**20), "0.5"], check=True,
                       capture_output=True)
        time.sleep(0.1)
        after = tree_rss_bytes()

    assert meter.cost.peak_rss_bytes - max(before, after) > 150 * 2**20
    assert meter.cost.wall_seconds >= 0.5
    assert after - before < 100 * 2**20  # the memory went back when the child exited
