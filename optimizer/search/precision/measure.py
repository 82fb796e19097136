"""What the precision search measures on built models, whatever their runtime: errors against
the float model, end-to-end latency, and the table built from both
(:func:`build_table`). Models are run through their runtime's runner
(:func:`tfopt.optimizer.runtime.load_runner`), so a mixed model is measured as the benchmark will
run it.

- **Errors** (:class:`ErrorMeter`): with labelled data, the accuracy lost against the float
  model under the gate's metric; without, the share of calibration rows whose top-1 differs
  from the float model's (fidelity to the input).
- **Latency** (:func:`p50_seconds`): several models' calls at batch 1 on one thread, timed
  interleaved in blocks of 10 calls, the order rotating (as the benchmark times candidates),
  so that a burst of load lands on all of them alike.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tfopt.optimizer.search.precision.table import PrecisionTable

log = logging.getLogger(__name__)

THREADS = 1


def _runner(path: Path, format: str, signature: str):
    from tfopt.optimizer.runtime import load_runner

    return load_runner(path, signature, format=format, num_threads=THREADS)


class ErrorMeter:
    """How much worse than the float model ``reference`` a built model is: accuracy lost on
    ``labels`` under ``metric`` when given, else the share of rows of ``x`` whose top-1 differs
    from the float model's."""

    def __init__(self, reference: Path, format: str, signature: str,
                 x: Mapping[str, np.ndarray], labels=None, metric: str = "top1"):
        self.format, self.signature = format, signature
        self.x, self.labels, self.metric = dict(x), labels, metric
        self.reference_outputs = self._outputs(reference)
        self.reference_score = self._score(self.reference_outputs)
        self.description = (f"{metric} lost against the float model" if labels is not None
                            else "top-1 disagreement with the float model")

    def _outputs(self, path: Path) -> np.ndarray:
        runner = _runner(path, self.format, self.signature)
        try:
            return np.asarray(runner(self.x)[runner.signature.outputs[0].key])
        finally:
            runner.close()

    def _score(self, outputs: np.ndarray) -> float:
        if self.labels is None:
            return 1.0
        from tfopt.optimizer.verify.evaluation import get_metric

        return float(get_metric(self.metric).fn(outputs, self.labels))

    def error(self, path: Path) -> float:
        outputs = self._outputs(path)
        if self.labels is None:
            return float(np.mean(outputs.argmax(-1) != self.reference_outputs.argmax(-1)))
        from tfopt.optimizer.verify.evaluation import get_metric

        drop = self.reference_score - self._score(outputs)
        return drop if get_metric(self.metric).higher_is_better else -drop


def p50_seconds(paths: Sequence[Path], format: str, signature: str,
                feeds: Mapping[str, np.ndarray], seconds: float = 1.5) -> list[float]:
    """Each model's p50 call at batch 1 (the first row of ``feeds``), timed interleaved."""
    from tfopt.optimizer.benchmark.interleaved import time_interleaved

    runners = [_runner(p, format, signature) for p in paths]
    try:
        row = {k: np.asarray(v)[:1] for k, v in feeds.items()}
        calls = {str(i): r.bind(r.to_tensors(row)) for i, r in enumerate(runners)}
        samples = time_interleaved(calls, warmup=10, min_runs=20, min_seconds=seconds,
                                   rotate_order=len(calls) > 1, block_size=10)
        return [samples[str(i)].p50 for i in range(len(runners))]
    finally:
        for r in runners:
            r.close()


class EndToEndLayerCosts:
    """Each layer's cost of staying in float, measured end to end, for a runtime with no
    per-op timer (LiteRT) or whose compiler fuses a layer with its quantizers (OpenVINO's CPU
    plugin): the model with only that layer in float against uniform int8, timed interleaved
    by ``measure_seconds`` (paths -> p50 seconds). int8 is the reference (0); boundaries are
    folded into the float costs (0 apart)."""

    def __init__(self, measure_seconds):
        self._measure_seconds = measure_seconds
        self.timings = 0

    def table_costs(self, model) -> tuple[dict, dict, list[tuple[str, str, float]]]:
        paths = [model.build()] + [model.build(float_layers=[n]) for n in model.layers]
        seconds = self._measure_seconds(paths)
        self.timings += len(paths)
        int8 = dict.fromkeys(model.layers, 0.0)
        floats = {n: max(0.0, s - seconds[0]) for n, s in zip(model.layers, seconds[1:])}
        edges = [(a, b, 0.0) for a, b, _ in model.edges()]
        return int8, floats, edges


def build_table(model, meter: ErrorMeter, costs,
                int8_seconds_end_to_end: float | None = None) -> PrecisionTable:
    """Measure each layer's sensitivity (quantized alone, kept alone in float) and cost, once.
    ``model`` is a runtime's precision model (``layers``, ``build``), ``costs`` its layer costs
    (``table_costs(model)``). ``int8_seconds_end_to_end``, uniform int8's call measured whole,
    sets what the layers' costs leave out (the call, the unsearched ops: ``base_seconds``), so
    that predictions read as latencies; their ranking does not depend on it."""
    started = time.perf_counter()
    quantized_alone, float_alone = {}, {}
    int8_error = meter.error(model.build())
    for layer in model.layers:
        quantized_alone[layer] = meter.error(model.build(only=[layer]))
        float_alone[layer] = meter.error(model.build(float_layers=[layer]))
    log.info("precision search: sensitivity of %d layers measured in %.1fs (%s)",
             len(model.layers), time.perf_counter() - started, meter.description)
    int8, floats, edges = costs.table_costs(model)
    base = 0.0
    if int8_seconds_end_to_end is not None:
        all_int8 = PrecisionTable(model.layers, int8, floats, tuple(edges), quantized_alone,
                                  float_alone, int8_error)
        base = max(0.0, int8_seconds_end_to_end - all_int8.latency(frozenset()))
    return PrecisionTable(model.layers, int8, floats, tuple(edges), quantized_alone,
                          float_alone, int8_error, base, meter.description)
