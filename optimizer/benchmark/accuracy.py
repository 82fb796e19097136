"""The evaluate stage: every measured model's accuracy on labelled data, the one place it is measured.

It takes the benchmark's :class:`~tfopt.optimizer.benchmark.result.BenchmarkResult` and returns it
with each model's :class:`~tfopt.optimizer.benchmark.result.Quality` (the metric, computed on the
model's outputs in its own runtime: a LiteRT champion in LiteRT) and its
:class:`~tfopt.optimizer.benchmark.result.Fidelity` to the accuracy reference (the unoptimized input)
on every row of the data. The pipeline's ``evaluate`` step and ``tfopt optimize --targets``
(:func:`tfopt.optimizer.gate.selection.select_candidate`) both call :func:`evaluate_models`, so that
the two doors report the same figures for the same models and data; the benchmark harness
times, it does not evaluate.

The reference runs once and its outputs are kept; then each other model is loaded alone, run
on the same batches, scored and compared, and released before the next one loads: the stage
holds two models' weights at most, whatever the number of candidates.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import numpy as np

from tfopt.optimizer.benchmark.result import BenchmarkResult, Fidelity, ModelMeasurement, Quality
from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.runtime import ModelRunner, load_runner
from tfopt.optimizer.verify.equivalence import compare_outputs
from tfopt.optimizer.verify.evaluation import EVAL_BATCH_SIZE, LabelledData, get_metric

log = logging.getLogger(__name__)

# what Fidelity.inputs says of figures measured on the labelled data's rows
EVAL_DATA = "eval data"


def evaluate_models(result: BenchmarkResult, data: LabelledData, metric: str = "top1", *,
                    signature: str = DEFAULT_SIGNATURE, policy: ScanPolicy = DEFAULT_POLICY,
                    progress: Callable[[str], None] | None = None) -> BenchmarkResult:
    """``result`` with every measured model's ``metric`` on ``data`` and each one's fidelity
    to :attr:`~tfopt.optimizer.benchmark.result.BenchmarkResult.accuracy_reference` on the same
    rows. Each model is loaded as it was timed (its format and thread count), its SavedModel
    read under ``policy``. The twin (the baseline timed twice) keeps what the benchmark
    measured: its accuracy is the baseline's."""
    scorer = get_metric(metric)
    say = progress or (lambda message: log.info("%s", message))
    reference = result.accuracy_reference
    runner = _load(reference, signature, policy)
    try:
        if len(runner.signature.inputs) != 1:
            raise InvalidInputsError(
                f"labelled data feeds one input, but {reference.label} has "
                f"{len(runner.signature.inputs)}: {runner.signature.describe()}")
        spec = runner.signature.inputs[0]
        x = data.x.astype(spec.numpy_dtype, copy=False)
        feeds = [{spec.key: x[i:i + EVAL_BATCH_SIZE]} for i in range(0, len(x), EVAL_BATCH_SIZE)]
        output_keys = runner.signature.output_keys
        say(f"evaluating {reference.label} ({reference.runtime}): {scorer.name} on "
            f"{len(data)} examples of {data.source}")
        expected = [runner(f) for f in feeds]
        updated = {reference.label: _scored(reference, runner, expected, data, scorer, None)}
    finally:
        runner.close()
    for model in result.measured:
        if model is reference:
            continue
        say(f"evaluating {model.label} ({model.runtime}): {scorer.name} and fidelity to "
            f"{reference.label}")
        runner = _load(model, signature, policy)
        try:
            outputs = [runner(f) for f in feeds]
            fidelity = Fidelity.of(compare_outputs(output_keys, expected, outputs), EVAL_DATA)
            updated[model.label] = _scored(model, runner, outputs, data, scorer, fidelity)
        finally:
            runner.close()
    return dataclasses.replace(
        result, baseline=updated[result.baseline.label],
        candidates=tuple(updated[c.label] for c in result.candidates),
        reference=updated[result.reference.label] if result.reference else None)


def _load(model: ModelMeasurement, signature: str, policy: ScanPolicy) -> ModelRunner:
    return load_runner(model.path, signature, format=model.format,
                       num_threads=model.num_threads, policy=policy)


def _scored(model: ModelMeasurement, runner: ModelRunner, outputs: list[dict],
            data: LabelledData, scorer, fidelity: Fidelity | None) -> ModelMeasurement:
    """``model`` with the metric of its ``outputs`` (its first output, as the runner names it)
    against the labels, and ``fidelity`` (None for the reference: its own, if any, stays)."""
    key = runner.signature.outputs[0].key
    value = scorer.fn(np.concatenate([o[key] for o in outputs], axis=0), data.y)
    quality = Quality(scorer.name, value, scorer.higher_is_better, len(data), data.source)
    return dataclasses.replace(model, quality=quality,
                               fidelity=fidelity if fidelity is not None else model.fidelity)
