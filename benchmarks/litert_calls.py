"""Two ``.tflite`` files, each called two ways, timed in one process: does a gap between two
models come from the models or from the code that calls them?

    .venv/bin/python benchmarks/litert_calls.py A.tflite B.tflite [--threads 2]
        [--seconds 20] [--rounds 40] [--vocabulary 10000]

The two ways:

- ``signature runner``: ``Interpreter(...).get_signature_runner()(**{key: x})``, as a user
  runs a model by hand and as ``LiteRTRunner`` called it before round 23 (its ``bind`` was
  ``lambda: runner(**keywords)``): per call the keyword dict, a resize and re-allocation of every
  input, the output dict;
- ``bound``: ``LiteRTRunner(path).bind(tensors)``, which is
  :meth:`tfopt.optimizer.runtime.litert.SignatureCall.bind` (the same native set, invoke and get,
  indices resolved once, no resize unless the shapes changed).

All four subjects are timed interleaved in blocks of 10 calls after one untimed call, the order
rotating every round (:func:`tfopt.optimizer.benchmark.interleaved.time_interleaved`), at ``--threads``
threads each. Inputs: one batch-1 row generated from the signature (string tokens drawn from
``token0`` .. ``token<vocabulary-2>``, the vocabulary of ``benchmarks/families.py``'s string
classifier, a quarter out of it); the outputs of the four are checked equal before timing.
Ratios are ``p50(A, signature runner) / p50(subject)`` with a 95% paired block-bootstrap
interval.

Results, 2026-11-25, 2 threads, ``flock /work/wt/bench.lock .venv/bin/python
benchmarks/litert_calls.py A B --seconds 20 --rounds 40`` with B =
``TFLiteConverter.from_saved_model(SRC).convert()`` of ``benchmarks/families.py``'s string
classifier (``work/families_r23/string/direct/model.tflite``) and A = the ``litert_fp32``
candidate ``tfopt optimize --targets savedmodel,litert,onnx,openvino --tune`` chose for it:
first (00:51, load average 7.9-8.1, 39107 rounds) as converted before round 23, the same ten
nodes in the execution plan as B; then (01:06, load average 15.6-14.5, 24615 rounds) as round 23
converts it, the lookup's index map folded into its table
(:func:`tfopt.optimizer.graph.lookup_gathers.fold_index_map_into_table`: ``HASHTABLE_FIND``,
``GATHER`` without ``LESS``, ``ADD``, ``SELECT_V2``; its outputs bit for bit B's). p50 us, and
``x`` = p50(A, signature runner) / p50 with its 95% interval:

| subject | A as B's ops: p50 | x | A folded: p50 | x |
|---|---:|---:|---:|---:|
| A signature runner | 6.89 | 1 | 5.99 | 1 |
| A bound | 3.25 | 2.119 [2.119, 2.120] | 2.76 | 2.176 [2.174, 2.178] |
| B signature runner | 6.89 | 1.001 [1.001, 1.001] | 6.85 | 0.875 [0.875, 0.875] |
| B bound | 3.24 | 2.128 [2.127, 2.129] | 3.18 | 1.893 [1.892, 1.894] |

With the same ops the two models tie through either kind of call (1.001x, 0.996x); the
``SignatureRunner`` call costs 3.6 us of its 6.9 us in Python, so a table that times one model
through one kind of call and the other through the other compares call code, not models. Folded,
A is 1.15x faster than B called either way (2.76 vs 3.18 us bound, 5.99 vs 6.85 us through the
``SignatureRunner``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

BLOCK_SIZE = 10


def subjects(paths: list[Path], threads: int, vocabulary: int) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.runtime.litert import LiteRTRunner

    calls, outputs = {}, {}
    feeds = None
    for name, path in zip("AB", paths):
        runner = LiteRTRunner(path, num_threads=threads)
        if feeds is None:
            tokens = np.array([f"token{i}" for i in range(vocabulary - 1)])
            vocabularies = {s.key: tokens for s in runner.signature.inputs if s.dtype == "string"}
            feeds = make_inputs(runner.signature, 1, seed=1, vocabularies=vocabularies)
        signature_runner = Interpreter(model_path=str(path),
                                       num_threads=threads).get_signature_runner()
        fixed = dict(feeds)
        calls[f"{name} signature runner"] = lambda r=signature_runner, f=fixed: r(**f)
        calls[f"{name} bound"] = runner.bind(runner.to_tensors(feeds))
        for label in (f"{name} signature runner", f"{name} bound"):
            outputs[label] = {k: np.asarray(v) for k, v in calls[label]().items()}
    first = next(iter(outputs.values()))
    for label, out in outputs.items():
        for key, value in out.items():
            np.testing.assert_allclose(value, first[key], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{label} differs")
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs=2, type=Path, help="A.tflite B.tflite")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--vocabulary", type=int, default=10000)
    args = parser.parse_args()

    from tfopt.optimizer.benchmark.interleaved import time_interleaved
    from tfopt.optimizer.benchmark.stats import p50_ratio_interval

    calls = subjects(args.models, args.threads, args.vocabulary)
    load = os.getloadavg()
    samples = time_interleaved(calls, warmup=20, min_runs=args.rounds,
                               min_seconds=args.seconds, rotate_order=True,
                               block_size=BLOCK_SIZE)
    base = samples["A signature runner"].round_figures
    print(f"A = {args.models[0]}\nB = {args.models[1]}\n{args.threads} threads, "
          f"{samples['A signature runner'].rounds} rounds of {BLOCK_SIZE}, load average "
          f"{load[0]:.2f} before, {os.getloadavg()[0]:.2f} after\n")
    print("| subject | p50 us | x A signature runner [95%] |")
    print("|---|---:|---:|")
    for label in calls:
        figures = samples[label].round_figures
        cell = "1"
        if label != "A signature runner":
            interval = p50_ratio_interval(base, figures)
            cell = f"{interval.speedup:.3f} [{1 / interval.high:.3f}, {1 / interval.low:.3f}]"
        print(f"| {label} | {np.median(figures) * 1e6:.2f} | {cell} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
