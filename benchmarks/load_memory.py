"""Where a loaded model's memory goes: the resident set of a fresh process at each step of
loading a SavedModel and calling it, for the stock model and the three SavedModels
``tfopt optimize`` makes of it (the optimized frozen graph, bf16, XLA).

Each figure comes from a process of its own (``/proc/self/status``: ``VmRSS`` after the step,
``VmHWM`` its peak so far): TensorFlow imported; ``tf.saved_model.load``; the first call
(function instantiation, Grappler, kernels' constants, oneDNN's reordered weights); 20 calls.
``--how`` adds other ways to load the same model, for what they save:

- ``tf``: ``tf.saved_model.load(path).signatures[name]`` (what the benchmark does);
- ``runner``: tfopt's own load (:func:`tfopt.optimizer.runtime.load_runner`), which lets a frozen
  model's load copies go before the first call
  (:class:`tfopt.optimizer.runtime.tensorflow.SignatureFunction`);
- ``session``: TF Serving's path, ``tf.compat.v1.saved_model.loader.load`` into a Session.

    .venv/bin/python benchmarks/load_memory.py --model work/bench/memory/models/mlp_100mb
        [--artifacts work/bench/memory/artifacts/mlp_100mb] [--how tf,runner,session]

``--speed`` times instead, in one process: each model's call as ``tf.saved_model.load`` returns
it (``ConcreteFunction._call_flat``, inputs bound once) against tfopt's runner's bound call,
interleaved in blocks, the median ratio per model (a timing: run it under the bench lock).

``--group LABEL=PATH ...`` runs one benchmark group instead (the harness's
:func:`~tfopt.optimizer.benchmark.harness.run_benchmark`: ``--model`` as the baseline and these
candidates, timed ``--seconds``) in a fresh process, and gives where its memory goes, phase by
phase: each model's load and first call, a LiteRT model's thread choice, the timing, each
fidelity check, and after the benchmark returns. Each phase's peak is the kernel's ``VmHWM``,
reset as the phase starts (``/proc/self/clear_refs``): a Python thread sampling ``VmRSS``
misses a load's peak, as TensorFlow holds the interpreter's lock through most of it (mlp_100mb's
XLA load: 2.41 GiB sampled, 2.78 by ``VmHWM``).

    .venv/bin/python benchmarks/load_memory.py --model work/bench/memory/models/mlp_100mb \
        --group xla=work/bench/memory/artifacts/mlp_100mb/xla [--seconds 3]

The artifacts (optimized, bf16, xla) are built once into ``--artifacts`` with tfopt's own
functions. Figures: the module :mod:`tfopt.optimizer.model.footprint`'s docstring.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import write_result

GIB = 2**30

PREPARE = r"""
import sys
from pathlib import Path
from tfopt.optimizer.optimize.flow import optimize, write_optimized
from tfopt.optimizer.optimize.recipe import default_recipe
from tfopt.optimizer.optimize.worker import full_model
source, out = sys.argv[1], Path(sys.argv[2])
result = optimize(source, default_recipe())
write_optimized(result, out / "optimized", overwrite=True)
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.candidates.bf16 import BF16_PROVENANCE, bf16_mixed_precision
from tfopt.optimizer.candidates.xla import write_xla_saved_model
model = full_model(result.candidate.model)
write_saved_model(bf16_mixed_precision(model), out / "bf16", overwrite=True,
                  metadata=BF16_PROVENANCE)
write_xla_saved_model(model, out / "xla", overwrite=True)
"""

MEASURE = r"""
import gc, json, sys, re, ctypes
def rss():
    text = open("/proc/self/status").read()
    f = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+)", text, re.M))
    return int(f["VmRSS"]) * 1024, int(f["VmHWM"]) * 1024
path, how = sys.argv[1], sys.argv[2]
steps = {"start": rss()}
import numpy as np
import tensorflow as tf
steps["import"] = rss()
if how == "session":
    sess = tf.compat.v1.Session(graph=tf.Graph())
    with sess.graph.as_default():
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
    sig = meta.signature_def["serving_default"]
    (key, info), = sig.inputs.items()
    shape = [1 if d.size < 0 else d.size for d in info.tensor_shape.dim]
    fetches = {k: v.name for k, v in sig.outputs.items()}
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    call = lambda: sess.run(fetches, {info.name: x})
elif how == "runner":
    from tfopt.optimizer.runtime import load_runner
    runner = load_runner(path)
    (spec,) = runner.signature.inputs
    feeds = {spec.key: np.random.default_rng(0).standard_normal(
        [1 if d is None else d for d in spec.shape]).astype("float32")}
    call = lambda: runner(feeds)
else:
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    (key, spec), = fn.structured_input_signature[1].items()
    shape = [1 if d is None else d for d in spec.shape]
    x = tf.constant(np.random.default_rng(0).standard_normal(shape).astype("float32"))
    call = lambda: fn(**{key: x})
steps["load"] = rss()
call()
steps["first call"] = rss()
for _ in range(20):
    call()
steps["20 calls"] = rss()
print(json.dumps(steps))
"""


SPEED = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
from tfopt.optimizer.runtime import load_runner
path, rounds = sys.argv[1], int(sys.argv[2])
fn = tf.saved_model.load(path).signatures["serving_default"]
runner = load_runner(path)
(spec,) = runner.signature.inputs
feeds = {spec.key: np.random.default_rng(0).standard_normal(
    [1 if d is None else d for d in spec.shape]).astype("float32")}
flat = runner.to_tensors(feeds)
stock = lambda: fn._call_flat(flat, fn.captured_inputs)
ours = runner.bind(flat)
for call in (stock, ours):
    for _ in range(5):
        call()
ratios = []
for _ in range(rounds):
    times = []
    for call in (stock, ours):
        started = time.perf_counter()
        for _ in range(10):
            call()
        times.append(time.perf_counter() - started)
    ratios.append(times[1] / times[0])
print(json.dumps({"median_ratio": float(np.median(ratios)), "rounds": rounds}))
"""


GROUP = r"""
import json, re, sys
from pathlib import Path
def status(field):
    text = open("/proc/self/status").read()
    return int(re.search(rf"^{field}:\s+(\d+)", text, re.M).group(1)) * 1024
phases = []  # [name, rss at its start, its peak, rss at its end]
def close_phase():
    if phases:
        phases[-1][2:] = [max(phases[-1][2], status("VmHWM")), status("VmRSS")]
    open("/proc/self/clear_refs", "w").write("5")
def mark(name):
    close_phase()
    phases.append([name, status("VmRSS"), 0, 0])
mark("import")
from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings
runtime = apply_runtime_settings(default_runtime_settings())
import tfopt.optimizer.benchmark.harness as harness
import tfopt.optimizer.benchmark.memory as memory
import tfopt.optimizer.benchmark.thread_choice as thread_choice
import tfopt.optimizer.verify.equivalence as equivalence
from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
def name(path):
    return Path(path).parent.name if Path(path).is_file() else Path(path).name
def marked(function, before, after=None):
    def call(*args, **kwargs):
        mark(before(*args))
        result = function(*args, **kwargs)
        if after:
            mark(after(*args))
        return result
    return call
# the harness's own per-model measure resets the peak too: the phase closes first
memory.reset_peak = lambda *args: (close_phase(), True)[1]
harness.load_runner = marked(harness.load_runner, lambda path, *a: f"load {name(path)}",
                             lambda path, *a: f"first call {name(path)}")
thread_choice.choose_threads = marked(thread_choice.choose_threads,
                                      lambda path, *a: f"thread choice {name(path)}")
harness.time_interleaved = marked(harness.time_interleaved, lambda *a: "timing")
equivalence.compare = marked(equivalence.compare, lambda *a: "fidelity check")
baseline, seconds = sys.argv[1], float(sys.argv[2])
candidates = [Subject.candidate(path, label=label)
              for label, path in (a.split("=", 1) for a in sys.argv[3:])]
run_benchmark(Subject.baseline(baseline), candidates, BenchmarkConfig(min_seconds=seconds),
              runtime=runtime, progress=lambda message: None)
mark("returned")
close_phase()
print(json.dumps(phases))
"""


def run(command: list[str]) -> str:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    return subprocess.run(command, check=True, env=env, capture_output=True, text=True).stdout


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the stock SavedModel")
    parser.add_argument("--artifacts", help="where tfopt's SavedModels of it are (built "
                                            "there when missing)")
    parser.add_argument("--how", default="tf", help="tf, runner, session (comma-separated)")
    parser.add_argument("--only", default="stock,optimized,bf16,xla")
    parser.add_argument("--speed", type=int, default=0, metavar="ROUNDS",
                        help="time tfopt's call against tf.saved_model.load's instead")
    parser.add_argument("--group", nargs="+", metavar="LABEL=PATH",
                        help="benchmark these candidates beside --model, phase by phase")
    parser.add_argument("--seconds", type=float, default=3.0, help="--group's timing")
    args = parser.parse_args(argv)
    model = Path(args.model)
    if args.group:
        return group_phases(model, args.group, args.seconds)
    artifacts = Path(args.artifacts or model.parent.parent / "artifacts" / model.name)
    if not (artifacts / "xla" / "saved_model.pb").is_file():
        run([sys.executable, "-c", PREPARE, str(model), str(artifacts)])
    paths = {"stock": model, **{k: artifacts / k for k in ("optimized", "bf16", "xla")}}
    rows = []
    for name in args.only.split(","):
        path = paths[name]
        if args.speed:
            speed = json.loads(run([sys.executable, "-c", SPEED, str(path), str(args.speed)]))
            print(f"{name:<9} tfopt's bound call / tf.saved_model.load's: "
                  f"{speed['median_ratio']:.3f} (median of {args.speed} rounds of 10 calls)")
            rows.append({"model": name, **speed})
            continue
        for how in args.how.split(","):
            steps = json.loads(run([sys.executable, "-c", MEASURE, str(path), how]))
            size = disk_bytes(path)
            base = steps["import"][0]
            cells = "  ".join(f"{step} {rss / GIB:5.2f} (peak {peak / GIB:5.2f})"
                              for step, (rss, peak) in steps.items() if step != "start")
            print(f"{name:<9} {how:<8} {size / 2**20:6.0f} MiB  {cells}  | over import: "
                  f"{(steps['20 calls'][0] - base) / size:4.1f}x disk resident, "
                  f"{(steps['20 calls'][1] - base) / size:4.1f}x peak", flush=True)
            rows.append({"model": name, "how": how, "disk_bytes": size, "steps": steps})
    print(f"results: {write_result('load_memory', {'model': str(model), 'rows': rows})}")
    return 0


def group_phases(model: Path, candidates: list[str], seconds: float) -> int:
    """One benchmark group's process, phase by phase (``--group``)."""
    phases = json.loads(run([sys.executable, "-c", GROUP, str(model), str(seconds),
                             *candidates]))
    for name, start, peak, end in phases:
        print(f"{name:<36} from {start / GIB:5.2f} GiB: peak {peak / GIB:5.2f} "
              f"(+{(peak - start) / GIB:4.2f}), then {end / GIB:5.2f} "
              f"({(end - start) / GIB:+5.2f})")
    print(f"results: {write_result('load_memory_group', {'model': str(model), 'candidates': candidates, 'phases': phases})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
