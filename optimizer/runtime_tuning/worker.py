"""The probe process: ``python -m optimizer.runtime_tuning.worker CONFIG_JSON``.

Started by :mod:`optimizer.runtime_tuning.probes`, not by people. It applies its thread setting
before TensorFlow starts (:func:`optimizer.benchmark.runtime.apply_runtime_settings`), loads the
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

from optimizer.errors import TfoptError
from optimizer.runtime_tuning.grid import ThreadSetting

_MAX_RUNS = 100_000


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _load_for_setting(model: str, signature: str, setting: ThreadSetting):
    from optimizer.runner import load_runner

    if setting.num_threads is not None:
        from optimizer.litert.runner import LiteRTRunner

        return LiteRTRunner(model, signature, num_threads=setting.num_threads)
    return load_runner(model, signature)


def _in_effect(setting: ThreadSetting, runner) -> dict:
    reported = {}
    if setting.intra_op_threads is not None:
        from optimizer.tf_runtime import import_tensorflow

        threading = import_tensorflow().config.threading
        reported["intra_op_threads"] = threading.get_intra_op_parallelism_threads()
        reported["inter_op_threads"] = threading.get_inter_op_parallelism_threads()
    if setting.num_threads is not None:
        reported["num_threads"] = getattr(runner, "num_threads", None)
    return reported


def _time_calls(runner, tensors, seconds: float, min_runs: int, warmup: int) -> dict:
    from optimizer.benchmark.interleaved import time_interleaved

    samples = time_interleaved({"model": lambda: runner.call(tensors)}, warmup=warmup,
                               min_runs=min_runs, min_seconds=seconds,
                               max_runs=_MAX_RUNS)["model"]
    return {"p50": samples.p50, "runs": len(samples.seconds)}


def _worker_main(config_text: str) -> int:
    # The protocol gets a private copy of stdout; anything a library prints goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def send(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    try:
        config = json.loads(config_text)
        setting = ThreadSetting.from_dict(config["setting"])
        if setting.intra_op_threads is not None:
            from optimizer.benchmark.runtime import RuntimeSettings, apply_runtime_settings

            apply_runtime_settings(RuntimeSettings(setting.intra_op_threads,
                                                   setting.inter_op_threads,
                                                   setting.intra_op_threads))
        runner = _load_for_setting(config["model"], config["signature"], setting)
        from optimizer.inputs import make_inputs

        tensors = {}

        def batch(size: int):
            if size not in tensors:
                tensors[size] = runner.to_tensors(make_inputs(runner.signature, size, seed=0))
            return tensors[size]

        runner.call(batch(1))
        in_effect = _in_effect(setting, runner)
        send({"ready": True, "pid": os.getpid(), "in_effect": in_effect, **in_effect})
        for line in iter(sys.stdin.readline, ""):
            command = json.loads(line)
            send(_time_calls(runner, batch(command["batch_size"]), command["seconds"],
                             command["min_runs"], command["warmup"]))
    except TfoptError as exc:
        send({"error": str(exc)})
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - reported to the parent, traceback on stderr
        import traceback

        traceback.print_exc()
        send({"error": f"{type(exc).__name__}: {_first_line(exc)}"})
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m optimizer.runtime_tuning.worker CONFIG_JSON "
                 "(started by optimizer.runtime_tuning; not a command for people)")
    sys.exit(_worker_main(sys.argv[1]))
