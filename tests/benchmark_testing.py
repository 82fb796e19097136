"""Helpers for the benchmark, gate and report tests: synthetic results and purpose-built models.

``synthetic_result`` makes a :class:`BenchmarkResult` from given latency samples without timing
anything, so gate semantics can be tested exactly. The model builders make real SavedModels
whose speed or accuracy differs on purpose.
"""

from __future__ import annotations

import numpy as np

from tfopt.optimizer.benchmark.environment import Environment
from tfopt.optimizer.benchmark.result import (
    CANDIDATE,
    UNOPTIMIZED_INPUT,
    BenchmarkResult,
    Fidelity,
    ModelMeasurement,
    Quality,
    TimingRecord,
)
from tfopt.optimizer.benchmark.stats import LatencySummary, p50_ratio_interval, round_figures
from tfopt.optimizer.system.cpu_threads import AppliedRuntime, CpuAvailability, RuntimeSettings


def fake_environment() -> Environment:
    settings = RuntimeSettings(intra_op_threads=2, inter_op_threads=1, omp_num_threads=2)
    runtime = AppliedRuntime(
        requested=settings, intra_op_threads=2, inter_op_threads=1, onednn_enabled=True,
        env={"OMP_NUM_THREADS": "2"}, settings_in_effect=True,
        cpus=CpuAvailability(logical_cpus=64, affinity_cpus=64, quota_cpus=2.0,
                             quota_source="/sys/fs/cgroup/cpu.max"))
    return Environment(cpu_model="Test CPU", isa={"avx2": True, "avx512": False},
                       tensorflow_version="2.21.0", tfopt_version="0.1.0",
                       python_version="3.11.0", platform="Linux-test", runtime=runtime)


def noisy_samples(p50: float, rounds: int, seed: int, noise: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return p50 * np.exp(rng.normal(0.0, noise, rounds))


def measurement(label: str, role: str, samples: dict[int, np.ndarray], size_bytes: int = 1000,
                quality: Quality | None = None, fidelity: Fidelity | None = None,
                peak_rss: int | None = 10_000_000) -> ModelMeasurement:
    return ModelMeasurement(
        label=label, role=role, path=f"/models/{label}", digest=f"sha256:{label}",
        size_bytes=size_bytes, load_seconds=0.1, first_call_seconds=0.01,
        rss_growth_bytes=peak_rss, peak_rss_growth_bytes=peak_rss, peak_rss_exact=True,
        latency={b: LatencySummary.of(s, b) for b, s in samples.items()},
        samples={b: tuple(float(v) for v in s) for b, s in samples.items()},
        quality=quality, fidelity=fidelity)


def synthetic_result(baseline_samples: dict[int, np.ndarray],
                     candidates: dict[str, dict], baseline_quality: Quality | None = None,
                     baseline_role: str = UNOPTIMIZED_INPUT,
                     confidence: float = 0.95, block_size: int = 1) -> BenchmarkResult:
    """``candidates``: label -> keyword arguments of :func:`measurement` (``samples`` needed:
    per-call seconds, ``block_size`` calls per round)."""
    base = measurement("baseline", baseline_role, baseline_samples, quality=baseline_quality)
    cands = tuple(measurement(label, CANDIDATE, **kwargs) for label, kwargs in candidates.items())
    ratios = {c.label: {b: p50_ratio_interval(round_figures(base.samples[b], block_size),
                                              round_figures(c.samples[b], block_size),
                                              confidence)
                        for b in c.samples} for c in cands}
    settings = TimingRecord(
        batch_sizes=tuple(sorted(baseline_samples)), warmup=5, min_runs=30, min_seconds=1.0,
        max_runs=10_000, confidence=confidence, resamples=2000, rotate_order=True,
        signature="serving_default", inputs="synthetic", block_size=block_size)
    return BenchmarkResult(baseline=base, candidates=cands, ratios=ratios, settings=settings,
                           environment=fake_environment(), created="2025-01-01T00:00:00",
                           wall_seconds=1.0)


def top1_fidelity(agreement: float = 1.0, max_rel: float = 0.0) -> Fidelity:
    return Fidelity(max_abs_diff=max_rel, max_rel_diff=max_rel, top1_agreement=agreement,
                    batches=3, inputs="generated")


# --- real models -------------------------------------------------------------------------------


def dense_stack(path, layers: int = 2, width: int = 16, classes: int = 4, seed: int = 0):
    """A Keras MLP exported as a stock SavedModel. Many small layers make the stock signature
    call's per-op overhead dominate, which freezing removes."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input((width,), name="features")
    x = inputs
    for _ in range(layers):
        x = keras.layers.Dense(width, activation="relu")(x)
    outputs = keras.layers.Dense(classes, activation="softmax", name="scores")(x)
    keras.Model(inputs, outputs).export(str(path), verbose=False)
    return path


def with_output_neutral_work(model, size: int = 256, steps: int = 4):
    """A copy of a FrozenModel whose output also depends on ``steps`` chained ``size x size``
    MatMuls of an input-derived matrix, multiplied by 0 and added: same outputs, more work.

    The chain starts from the input (its mean), so it cannot be constant-folded away.
    """
    from tfopt.optimizer.model.frozen import FrozenModel
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    graph = tf.Graph()
    rng = np.random.default_rng(0)
    with graph.as_default():
        tf.compat.v1.import_graph_def(model.graph_def, name="")
        inp = graph.get_tensor_by_name(model.signature.inputs[0].tensor_name)
        out_spec = model.signature.outputs[0]
        out = graph.get_tensor_by_name(out_spec.tensor_name)
        weights = tf.constant(rng.normal(0, 1 / np.sqrt(size), (size, size)).astype(np.float32))
        m = tf.tanh(weights + tf.reduce_mean(inp), name="slow/seed")
        for i in range(steps):
            m = tf.tanh(tf.matmul(m, weights), name=f"slow/step{i}")
        neutral = tf.multiply(tf.reduce_sum(m), 0.0, name="slow/zero")
        slowed = tf.add(out, neutral, name="slow/output")
    signature = type(model.signature)(
        name=model.signature.name, inputs=model.signature.inputs,
        outputs=(out_spec.with_tensor_name(slowed.name),) + model.signature.outputs[1:],
        method_name=model.signature.method_name)
    return FrozenModel(graph.as_graph_def(), signature, source=model.source,
                       history=model.history + ("with_output_neutral_work",))


def with_damaged_weights(model, seed: int = 0):
    """A copy of a FrozenModel whose largest float Const (a weight matrix) is replaced by noise."""
    from tensorflow.core.framework import graph_pb2

    from tfopt.optimizer.graph.consts import values_from_const
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    graph_def = graph_pb2.GraphDef()
    graph_def.CopyFrom(model.graph_def)
    consts = [n for n in graph_def.node
              if n.op == "Const" and n.attr["dtype"].type == tf.float32.as_datatype_enum]
    target = max(consts, key=lambda n: values_from_const(n).size)
    values = values_from_const(target)
    noise = np.random.default_rng(seed).normal(0, values.std() * 3, values.shape)
    target.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(noise.astype(np.float32)))
    return model.with_graph(graph_def, step=f"damaged {target.name}")
