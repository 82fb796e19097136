"""The benchmark's block timing ranks candidates as each one timed alone does: the order a
serving process would see. (benchmarks/block_timing.py compares all candidates, and the old
one-call interleaving, on the trained digits CNN and MobileNetV2.)"""

import numpy as np
import pytest

from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
from tfopt.optimizer.benchmark.interleaved import time_interleaved
from tfopt.optimizer.candidates.litert.convert import convert_to_litert
from tfopt.optimizer.inputs.calibration import synthetic
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.runtime import load_runner


@pytest.fixture(scope="module")
def candidates(tmp_path_factory):
    """The digits CNN's architecture, untrained (speed does not depend on the weights), as a
    SavedModel and as LiteRT fp32 and full int8: measured 420 us, 13 us and 7 us at batch 1."""
    from tfopt.components.demo.digits import build_digits_cnn
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    import keras

    root = tmp_path_factory.mktemp("ranking")
    keras.utils.set_random_seed(0)
    build_digits_cnn().export(str(root / "savedmodel"), verbose=False)
    calibration = synthetic(get_signature(root / "savedmodel"), 20)
    for flavour in ("fp32", "full_int8"):
        convert_to_litert(root / "savedmodel", root / f"{flavour}.tflite", flavour,
                          representative_data=calibration.feeds)
    return root


def p50s_alone(models, passes: int = 3) -> dict[str, float]:
    """Each model timed on its own, many consecutive calls and nothing else in between: its
    steady state. Models take turns, ``passes`` times over, and the median pass counts, which
    outlasts a burst of load on one pass."""
    calls = {}
    for model in models:
        runner = load_runner(model.path, num_threads=model.num_threads)
        tensors = runner.to_tensors(make_inputs(runner.signature, 1, 0))
        calls[model.label] = lambda r=runner, t=tensors: r.call(t)
    p50s = {label: [] for label in calls}
    for _ in range(passes):
        for label, call in calls.items():
            p50s[label].append(time_interleaved({label: call}, warmup=20, min_runs=300,
                                                min_seconds=0.3)[label].p50)
    return {label: float(np.median(values)) for label, values in p50s.items()}


def test_block_timing_ranks_candidates_as_timing_each_alone_does(candidates):
    result = run_benchmark(
        Subject.baseline(candidates / "savedmodel", label="savedmodel"),
        [Subject.candidate(candidates / f"{f}.tflite", label=f) for f in ("fp32", "full_int8")],
        BenchmarkConfig(warmup=5, min_runs=30, min_seconds=1.0))
    assert result.settings.block_size == 10

    blocked = {m.label: m.latency[1].p50 for m in result.models}
    alone = p50s_alone(result.models)
    assert sorted(blocked, key=blocked.get) == sorted(alone, key=alone.get) == [
        "full_int8", "fp32", "savedmodel"], (blocked, alone)
