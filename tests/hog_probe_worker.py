"""A probe worker for tests: the real one (``tfopt.optimizer.runtime_tuning.worker``), except that the
probe of the thread setting labelled ``$HOG_SETTING`` allocates memory, 32 MiB every 20 ms
(touched pages), without ever loading the model: what a probe that crosses the memory budget
looks like to the watchdog. It gives up at 6 GiB (exit 3), so a watchdog that fails to stop it
fails the test instead of taking the machine's memory."""

import json
import os
import runpy
import sys
import time

from tfopt.optimizer.runtime_tuning.grid import ThreadSetting

if ThreadSetting.from_dict(json.loads(sys.argv[1])["setting"]).label == \
        os.environ.get("HOG_SETTING"):
    held = []
    for _ in range(6 * 1024 // 32):
        held.append(b"\1" * (32 << 20))
        time.sleep(0.02)
    sys.exit(3)
runpy.run_module("tfopt.optimizer.runtime_tuning.worker", run_name="__main__")
