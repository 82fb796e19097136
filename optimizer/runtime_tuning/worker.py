"""The probe process: ``python -m tfopt.optimizer.runtime_tuning.worker CONFIG_JSON``.

Started by :mod:`tfopt.optimizer.runtime_tuning.probes`, not by people. It applies its thread setting
before TensorFlow starts (:func:`tfopt.optimizer.system.cpu_threads.apply_runtime_settings`), loads the
model, calls it once at batch 1, and reports ``{"ready": true, "intra_op_threads": ...,
"inter_op_threads": ...}`` as TensorFlow reads them back (or ``num_threads`` for LiteRT). Then,
for each ``{"batch_size", "seconds", "min_runs", "warmup"}`` line on stdin, it times calls on
generated inputs and answers ``{"p50": seconds, "runs": n}``; EOF ends it. A failure is
answered ``{"error": "one line"}``.
"""

from __future__ import annotations

import json
import os
import sys

from tfopt.optimizer.runtime_tuning.grid import ThreadSetting
from tfopt.optimizer.system.worker_process import serve

_MAX_RUNS = 100_000


def _load_for_setting(model: str, signature: str, setting: ThreadSetting, policy: dict):
    from tfopt.optimizer.model.op_scan import ScanPolicy
    from tfopt.optimizer.records import record_from_dict
    from tfopt.optimizer.runtime import load_runner

    return load_runner(model, signature, num_threads=setting.num_threads,
                       policy=record_from_dict(ScanPolicy, policy))


def _in_effect(setting: ThreadSetting, runner) -> dict:
    reported = {}
    if setting.intra_op_threads is not None:
        from tfopt.optimizer.tf_runtime import import_tensorflow

        threading = import_tensorflow().config.threading
        reported["intra_op_threads"] = threading.get_intra_op_parallelism_threads()
        reported["inter_op_threads"] = threading.get_inter_op_parallelism_threads()
    if setting.num_threads is not None:
        reported["num_threads"] = getattr(runner, "num_threads", None)
    return reported


def _time_calls(runner, tensors, seconds: float, min_runs: int, warmup: int) -> dict:
    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.runtime.call_deadline import timing_deadline

    # One model per process: its calls are consecutive, as a server makes them, so one call per
    # "round" already times it warm; blocks (and their untimed call) would add nothing.
    with timing_deadline([runner.deadline_clock()], warmup + min_runs + 1, seconds,
                         runner.description):
        samples = time_interleaved({"model": lambda: runner.call(tensors)}, warmup=warmup,
                                   min_runs=min_runs, min_seconds=seconds,
                                   max_runs=_MAX_RUNS)["model"]
    return {"p50": samples.p50, "runs": len(samples.seconds)}


def _start(config_text: str):
    config = json.loads(config_text)
    setting = ThreadSetting.from_dict(config["setting"])
    if setting.intra_op_threads is not None:
        from tfopt.optimizer.system.cpu_threads import RuntimeSettings, apply_runtime_settings

        apply_runtime_settings(RuntimeSettings(setting.intra_op_threads,
                                               setting.inter_op_threads,
                                               setting.intra_op_threads))
    runner = _load_for_setting(config["model"], config["signature"], setting, config["policy"])
    from tfopt.optimizer.inputs.generated import make_inputs

    tensors = {}

    def batch(size: int):
        if size not in tensors:
            tensors[size] = runner.to_tensors(make_inputs(runner.signature, size, seed=0))
            with runner.deadline_clock().call():  # a first call at this size, under its own
                runner.call(tensors[size])
        return tensors[size]

    def handle(command: dict) -> dict:
        return _time_calls(runner, batch(command["batch_size"]), command["seconds"],
                           command["min_runs"], command["warmup"])

    batch(1)  # its first call
    in_effect = _in_effect(setting, runner)
    return {"ready": True, "pid": os.getpid(), "in_effect": in_effect, **in_effect}, handle


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tfopt.optimizer.runtime_tuning.worker CONFIG_JSON "
                 "(started by tfopt.optimizer.runtime_tuning; not a command for people)")
    sys.exit(serve(lambda: _start(sys.argv[1])))
