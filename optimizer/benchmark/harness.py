"""Benchmark a baseline against one or more candidates, in one process, for the quality gate.

For each model: load time, the RSS it adds, size and digest of its directory. Then, per batch
size, all models are timed *interleaved in blocks*: per round, ``block_size`` consecutive calls
of each model after one untimed call, the order rotating every round, after a warm-up, until
both ``min_runs`` rounds and ``min_seconds`` have passed (:mod:`tfopt.optimizer.benchmark.interleaved`
says why blocks: a model called once between other models' calls is timed cold, as no serving
process runs it). Noise on a shared machine (a neighbour's burst, a frequency change) then lands
on every model alike and cancels in the candidate/baseline ratio, whose confidence interval is a
paired block bootstrap over rounds, each model's round figure being the median of its block
(see :mod:`tfopt.optimizer.benchmark.stats`). Latency is reported as p50/p90/p99/mean and
throughput (items/s) at each batch size.

Quality is measured per model: with labelled data, a metric (``top1`` by default; see
:mod:`tfopt.optimizer.verify.evaluation`); always, for each candidate, fidelity to the baseline (top-1
agreement, max absolute and relative output error) on the eval data's inputs, or on inputs
generated from the signature when there is none.

Generated inputs follow the signature (:func:`tfopt.optimizer.inputs.generated.make_inputs`); string inputs take
their tokens from the model's own vocabulary (:mod:`tfopt.optimizer.inputs.vocabulary`), a quarter of them out
of it.

Memory: models share the process, so per model the harness records how much the resident set
grew, and how far its peak rose, while that model was loaded and called once
(:mod:`tfopt.optimizer.benchmark.memory`): the model's increment, not the footprint of a process serving it
alone, which would add the TF runtime (hundreds of MB, loaded before any model and counted in
none).

Thread settings must be applied before TF starts (:mod:`tfopt.optimizer.system.cpu_threads`); pass the
:class:`AppliedRuntime` from ``apply_runtime_settings`` or let the harness apply the defaults.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfopt.optimizer.benchmark.environment import capture_environment, model_digest
from tfopt.optimizer.benchmark.interleaved import (
    scaled_block_size,
    time_interleaved,
)
from tfopt.optimizer.benchmark.memory import measure_rss_growth
from tfopt.optimizer.benchmark.result import (
    BASELINE_ROLES,
    CANDIDATE,
    CHAMPION,
    REFERENCE,
    TWIN,
    UNOPTIMIZED_INPUT,
    BenchmarkResult,
    Fidelity,
    ModelMeasurement,
    Quality,
    TimingRecord,
)
from tfopt.optimizer.benchmark.settings import BenchmarkConfig
from tfopt.optimizer.benchmark.stats import (
    LatencySummary,
    RatioInterval,
    head_to_head_interval,
    p50_ratio_interval,
    promotion_bound,
    round_figures,
    tie_unresolved,
)
from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.inputs.generated import OUT_OF_VOCABULARY_SHARE, make_inputs
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.signature import SignatureInfo, contract_difference
from tfopt.optimizer.runtime import ModelRunner, load_runner, read_signature
from tfopt.optimizer.runtime.registry import model_files
from tfopt.optimizer.system.cpu_threads import (
    AppliedRuntime,
    apply_runtime_settings,
    default_runtime_settings,
)
from tfopt.optimizer.verify.evaluation import (
    EVAL_BATCH_SIZE,
    LabelledData,
    evaluate,
    get_metric,
    load_labelled_data,
)

log = logging.getLogger(__name__)

MAX_SECONDS_PER_MIN_SECOND = 4
FIDELITY_ROWS = 256  # eval rows compared against the baseline (in batches of EVAL_BATCH)
EVAL_BATCH = EVAL_BATCH_SIZE


@dataclass(frozen=True)
class Subject:
    """A model to benchmark: a SavedModel directory or a model file of another format (its
    size and digest are the file's and its companions', such as an OpenVINO IR's ``.bin``), a
    display label and its role. ``format`` (default: what the path looks
    like) and ``num_threads`` (per-model runtimes; default: the CPUs available) say how it
    runs: :func:`tfopt.optimizer.runtime.load_runner`. ``precision_rank`` is a candidate's precision
    as the gate ranks it on a near tie (:func:`tfopt.optimizer.gate.near_ties.precision_rank` of its
    record's :attr:`~tfopt.optimizer.candidates.candidate.Candidate.precision`; 0: float32, lower is
    preferred): timing goes on while the gate's choice between it and a faster, less precise
    candidate is unresolved (:func:`_settled`). None: not known, no such wait. A rank, not the
    precision itself: the candidates' precision order is theirs, and the benchmark sits below
    them (docs/architecture.md)."""

    path: Path
    role: str
    label: str = ""
    format: str | None = None
    num_threads: int | None = None
    precision_rank: int | None = None

    @classmethod
    def baseline(cls, path: str | os.PathLike, role: str = UNOPTIMIZED_INPUT,
                 label: str = "", format: str | None = None,
                 num_threads: int | None = None) -> Subject:
        if role not in BASELINE_ROLES:
            raise InvalidInputsError(f"unknown baseline role '{role}'; one of "
                                     f"{', '.join(BASELINE_ROLES)}")
        return cls(Path(path), role, label, format, num_threads)

    @classmethod
    def candidate(cls, path: str | os.PathLike, label: str = "",
                  format: str | None = None, precision_rank: int | None = None) -> Subject:
        return cls(Path(path), CANDIDATE, label, format, precision_rank=precision_rank)

    @classmethod
    def reference(cls, path: str | os.PathLike, label: str = "input") -> Subject:
        """The unoptimized input, measured for accuracy beside a champion baseline."""
        return cls(Path(path), REFERENCE, label)


def _unique_labels(subjects: Sequence[Subject]) -> list[str]:
    labels, seen = [], set()
    for subject in subjects:
        base = subject.label or subject.path.name or str(subject.path)
        label, n = base, 2
        while label in seen:
            label, n = f"{base}#{n}", n + 1
        seen.add(label)
        labels.append(label)
    return labels


def _rows(array: np.ndarray, batch_size: int) -> np.ndarray:
    """``batch_size`` rows of ``array``, repeating its rows when it has fewer."""
    if len(array) >= batch_size:
        return array[:batch_size]
    return np.resize(array, (batch_size, *array.shape[1:]))


@dataclass(frozen=True)
class _Generation:
    """What generated inputs draw from: the model's own tokens for inputs that key a table
    (:mod:`tfopt.optimizer.inputs.vocabulary`), and ``[0, rows)`` for integer ids that index an
    embedding (:func:`tfopt.optimizer.inputs.generated.infer_int_ranges`). Without the rows, ids
    would all be 0 or 1: a check on two embedding rows cannot tell an int8 model that keeps
    the top-1 from one that loses it."""

    vocabularies: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    int_ranges: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    def inputs(self, signature: SignatureInfo, batch_size: int, seed: int) -> dict:
        return make_inputs(signature, batch_size, seed, dict(self.int_ranges),
                           vocabularies=dict(self.vocabularies))


def _batch_feeds(signature: SignatureInfo, batch_size: int, seed: int,
                 inputs: Mapping[str, np.ndarray] | None,
                 eval_data: LabelledData | None,
                 generation: _Generation | None = None) -> dict[str, np.ndarray]:
    if inputs is not None:
        return {k: _rows(np.asarray(inputs[k]), batch_size) for k in signature.input_keys}
    if eval_data is not None and len(signature.inputs) == 1:
        spec = signature.inputs[0]
        return {spec.key: _rows(eval_data.x, batch_size).astype(spec.numpy_dtype, copy=False)}
    return (generation or _Generation()).inputs(signature, batch_size, seed)


def _fidelity_feeds(runner: ModelRunner, seed: int, inputs, eval_data,
                    generation: _Generation | None = None) -> tuple[list, str]:
    if eval_data is not None and len(runner.signature.inputs) == 1:
        spec = runner.signature.inputs[0]
        x = eval_data.x[:FIDELITY_ROWS].astype(spec.numpy_dtype, copy=False)
        return [{spec.key: x[i:i + EVAL_BATCH]} for i in range(0, len(x), EVAL_BATCH)], \
            "eval data"
    if inputs is not None:
        return [dict(inputs)], "supplied"
    generation = generation or _Generation()
    return [generation.inputs(runner.signature, 8, seed + 100 + i) for i in range(3)], \
        "generated"


def _generation(subjects: Sequence[Subject], contract: SignatureInfo, signature: str,
                generated: bool, policy: ScanPolicy) -> _Generation:
    """How to generate inputs for ``subjects``, read from the SavedModels among them; nothing
    to read when the inputs are supplied or none is an integer or a string. The models are
    read under ``policy`` (:mod:`tfopt.optimizer.model.op_scan`)."""
    if not generated or not any(s.dtype == "string" or s.dtype.startswith(("int", "uint"))
                                for s in contract.inputs):
        return _Generation()
    from tfopt.optimizer.inputs.vocabulary import saved_model_input_draws
    from tfopt.optimizer.runtime import detect_format

    paths = [s.path for s in subjects if (s.format or detect_format(s.path)) == "savedmodel"]
    return _Generation(*saved_model_input_draws(paths, signature, contract, policy=policy))


@dataclass
class _Loaded:
    subject: Subject
    label: str
    runner: ModelRunner
    load_seconds: float
    first_call_seconds: float
    growth: object


def _load(subject: Subject, label: str, signature: str, first_feeds, policy: ScanPolicy
          ) -> _Loaded:
    with measure_rss_growth() as growth:
        started = time.perf_counter()
        runner = load_runner(subject.path, signature, format=subject.format,
                             num_threads=subject.num_threads, policy=policy)
        load_seconds = time.perf_counter() - started
        started = time.perf_counter()
        runner(first_feeds(runner))
        first_call = time.perf_counter() - started
    return _Loaded(subject, label, runner, load_seconds, first_call, growth)


def _with_serving_threads(subject: Subject, baseline: Subject, signature: str, feeds,
                          runtime: AppliedRuntime, say: Callable[[str], None],
                          label: str, policy: ScanPolicy) -> Subject:
    """``subject`` with the thread count it would be served with, where its runtime takes one
    per model and none was given: a champion's recorded count for the candidates in its runtime
    (like for like with the model as deployed; tuning after the gate finds the winner's own),
    else a quick choice between 1 thread and all CPUs (:mod:`tfopt.optimizer.benchmark.thread_choice`).
    """

    from tfopt.optimizer.benchmark.thread_choice import choose_threads
    from tfopt.optimizer.runtime import detect_format, runtime_for

    fmt = subject.format or detect_format(subject.path)
    if subject.num_threads is not None or not runtime_for(fmt).per_model_threads:
        return subject
    champion_fmt = baseline.format or detect_format(baseline.path)
    if baseline.role == CHAMPION and champion_fmt == fmt and baseline.num_threads is not None:
        say(f"{label}: {baseline.num_threads} thread(s), as the champion in its runtime")
        return dataclasses.replace(subject, format=fmt, num_threads=baseline.num_threads)
    threads, ratio = choose_threads(subject.path, signature, fmt, feeds,
                                    runtime.cpus.available, policy=policy)
    if ratio is not None:
        say(f"{label}: {threads} thread(s) (1 thread takes {ratio:.2f}x the time of "
            f"{runtime.cpus.available})")
    return dataclasses.replace(subject, format=fmt, num_threads=threads)


def _scaled_block_size(models: Sequence[_Loaded], config: BenchmarkConfig, feeds) -> int:
    """``config.block_size``, or fewer calls when the slowest model's warm call lasts
    ``block_seconds`` or more (:func:`scaled_block_size`)."""
    if config.block_size == 1 or config.block_seconds <= 0:
        return config.block_size
    return scaled_block_size([item.runner.bind(item.runner.to_tensors(feeds(item.runner)))
                              for item in models], config.block_size, config.block_seconds)


def _timing_deadline(models: Sequence[_Loaded], config: BenchmarkConfig, block_size: int,
                     batch_size: int):
    """One batch size's timing under a deadline: every call it may make, plus the time it may
    go on for (:func:`~tfopt.optimizer.runtime.call_deadline.timing_deadline`)."""
    from tfopt.optimizer.runtime.call_deadline import timing_deadline

    return timing_deadline([item.runner.deadline_clock() for item in models],
                           config.warmup + (block_size + 1) * config.min_runs,
                           config.min_seconds + _max_seconds(config),
                           f"{', '.join(item.label for item in models)} at batch {batch_size}")


def _max_seconds(config: BenchmarkConfig) -> float:
    if config.max_seconds is None:
        return MAX_SECONDS_PER_MIN_SECOND * config.min_seconds
    return config.max_seconds


def _settled(config: BenchmarkConfig, block_size: int, baseline: str, candidates: Sequence[str],
             twin: str | None, precision_ranks: Mapping[str, int] | None = None,
             say: Callable[[str], None] | None = None):
    """``time_interleaved``'s question, once the minimums are reached: is the gate's answer
    known? Every candidate's interval is clear of the promotion bound (wholly below it, or
    wholly above), and among those below it the choice is resolved: the fastest against each
    one the near-tie rule would prefer on a tie (a lower ``precision_ranks`` entry) is no
    longer :func:`~tfopt.optimizer.benchmark.stats.tie_unresolved` head to head
    (:func:`~tfopt.optimizer.benchmark.stats.head_to_head_interval`, the gate's own interval). A
    candidate that will fail its accuracy budget may keep the timing going: accuracy is
    measured after timing, and that only costs time. Each look that goes on tells ``say`` why.
    ``None`` (no adaptive stopping) without ``settle_speedup`` or ``max_seconds``."""
    if config.settle_speedup is None or _max_seconds(config) <= 0:
        return None
    ranks = precision_ranks or {}

    def figures(samples, label) -> np.ndarray:
        n = len(samples[label]) // block_size * block_size
        return round_figures(samples[label][:n], block_size)

    def interval(samples, label) -> RatioInterval:
        return p50_ratio_interval(figures(samples, baseline), figures(samples, label),
                                  config.confidence, config.resamples, seed=config.seed)

    def unresolved_choice(samples, cleared: Mapping[str, RatioInterval]) -> str | None:
        fastest = min(cleared, key=lambda label: cleared[label].ratio)
        if ranks.get(fastest) is None:
            return None
        for label in cleared:
            if ranks.get(label) is None or ranks[label] >= ranks[fastest]:
                continue
            paired = head_to_head_interval(figures(samples, fastest), figures(samples, label),
                                           config.confidence, config.resamples,
                                           seed=config.seed)
            if tie_unresolved(paired):
                return (f"{label} / {fastest} head to head {paired.low:.3f}-{paired.high:.3f} "
                        f"reaches 1, the gate's choice between them is unresolved")
        return None

    def why_not_settled(samples) -> str | None:
        bound = promotion_bound(config.settle_speedup,
                                interval(samples, twin) if twin else None)
        intervals = {label: interval(samples, label) for label in candidates}
        for label, r in intervals.items():
            if r.low < bound <= r.high:
                return (f"{label}'s interval {r.low:.3f}-{r.high:.3f} straddles the bound "
                        f"{bound:.3f}")
        cleared = {label: r for label, r in intervals.items() if r.high < bound}
        return unresolved_choice(samples, cleared) if cleared else None

    def settled(samples) -> bool:
        why = why_not_settled(samples)
        if why is not None and say is not None:
            say(f"{len(samples[baseline]) // block_size} rounds, timing on: {why}")
        return why is None

    return settled


def run_benchmark(
    baseline: Subject,
    candidates: Sequence[Subject],
    config: BenchmarkConfig | None = None,
    runtime: AppliedRuntime | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    eval_data: LabelledData | str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    reference: Subject | None = None,
    *,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> BenchmarkResult:
    """Measure ``baseline`` and every candidate; the result the gate and the report read.

    ``inputs`` (``{input key: array}``) or ``eval_data`` supply the timed inputs (rows are
    taken, or repeated, to each batch size); otherwise they are generated from the signature.
    ``reference`` (the unoptimized input, when the baseline is a champion) is loaded beside
    them but not timed: accuracy and every model's fidelity are measured against it.
    """
    if not candidates:
        raise InvalidInputsError("nothing to compare: give at least one candidate")
    config = config or BenchmarkConfig()
    metric = get_metric(config.metric)
    say = progress or (lambda message: log.info("%s", message))
    started = time.perf_counter()
    runtime = runtime or apply_runtime_settings(default_runtime_settings())

    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    tf.constant(0.0) + 1.0  # start TF's runtime now, so no model's RSS growth includes it

    twin = [Subject(baseline.path, TWIN, "twin", baseline.format, baseline.num_threads)
            ] if config.twin else []
    subjects = [baseline, *candidates, *twin, *([reference] if reference is not None else [])]
    labels = _unique_labels(subjects)
    contract = read_signature(baseline.path, config.signature, format=baseline.format,
                              policy=policy)
    if isinstance(eval_data, (str, os.PathLike)):
        eval_data = load_labelled_data(eval_data, contract)

    generation = _generation(subjects, contract, config.signature,
                             generated=inputs is None and eval_data is None,
                             policy=policy)
    first_feeds = _batch_feeds(contract, min(config.batch_sizes), config.seed, inputs, eval_data,
                               generation)
    loaded: list[_Loaded] = []
    for subject, label in zip(subjects, labels):
        if subject.role == TWIN:  # as the baseline was loaded, threads and all
            subject = dataclasses.replace(loaded[0].subject, role=TWIN, label=label)
        elif subject.role != REFERENCE:
            subject = _with_serving_threads(subject, baseline, config.signature, first_feeds,
                                            runtime, say, label, policy)
        say(f"loading {label} ({subject.role}) from {subject.path}")
        item = _load(subject, label, config.signature, lambda r: _batch_feeds(
            r.signature, min(config.batch_sizes), config.seed, inputs, eval_data, generation),
            policy)
        # the converters' own check: a dimension may be unknown on one side (tf2onnx leaves
        # an LSTM's time dimension unknown), a known one must agree
        if loaded and contract_difference(loaded[0].runner.signature, item.runner.signature):
            raise InvalidInputsError(
                f"{label} has signature {item.runner.signature.describe()}, but the baseline "
                f"has {loaded[0].runner.signature.describe()}: they cannot be compared")
        loaded.append(item)
    # The reference is loaded like the others (its memory and accuracy are measured) but only
    # the baseline and the candidates are timed.
    checked = loaded[-1] if reference is not None else None
    timed_models = loaded[:-1] if reference is not None else loaded
    ref_item = checked or loaded[0]
    twin_item = timed_models[-1] if config.twin else None
    block_size = _scaled_block_size(timed_models, config, lambda r: _batch_feeds(
        r.signature, min(config.batch_sizes), config.seed, inputs, eval_data, generation))
    if block_size < config.block_size:
        say(f"blocks of {block_size} call(s), not {config.block_size}: a call takes "
            f"{config.block_seconds:g}s or more, long enough to time it warm without a block")

    samples: dict[str, dict[int, tuple[float, ...]]] = {item.label: {} for item in loaded}
    rounds: dict[str, dict[int, np.ndarray]] = {item.label: {} for item in loaded}
    for batch_size in config.batch_sizes:
        feeds = _batch_feeds(loaded[0].runner.signature, batch_size, config.seed, inputs,
                             eval_data, generation)
        # one untimed call each under its deadline first: a model that never returns at this
        # size is stopped here (tfopt.optimizer.runtime.call_deadline), the bound calls are not
        for item in timed_models:
            item.runner(feeds)
        # bound calls: the arguments packed once, as a serving loop with its inputs ready
        # calls the runtime (ModelRunner.bind); packing them per call would be timed too
        calls = {item.label: item.runner.bind(item.runner.to_tensors(feeds))
                 for item in timed_models}
        each = (f"in blocks of {block_size} calls" if block_size > 1
                else "one call each per round")
        say(f"batch {batch_size}: timing {len(calls)} models interleaved {each}, at least "
            f"{config.min_runs} rounds and {config.min_seconds:g}s")
        timing_started = time.perf_counter()
        with _timing_deadline(timed_models, config, block_size, batch_size):
            timed = time_interleaved(
                calls, warmup=config.warmup, min_runs=config.min_runs,
                min_seconds=config.min_seconds, max_runs=config.max_runs, rotate_order=True,
                progress_every=config.progress_every, block_size=block_size,
                settled=_settled(config, block_size, loaded[0].label,
                                 [item.label for item in timed_models[1:] if item is not twin_item],
                                 twin_item.label if twin_item else None,
                                 # the gate chooses at the smallest batch size (its default)
                                 {item.label: item.subject.precision_rank for item in timed_models
                                  if item.subject.precision_rank is not None}
                                 if batch_size == min(config.batch_sizes) else None,
                                 lambda message, b=batch_size: say(f"batch {b}: {message}")),
                max_seconds=_max_seconds(config),
                wait_idle_after=[item.label for item in timed_models
                                 if item.runner.spins_after_call],
                progress=lambda done, elapsed, b=batch_size: say(
                    f"batch {b}: {done} rounds, {elapsed:.0f}s"))
        base_timed = timed[loaded[0].label]
        say(f"batch {batch_size}: {base_timed.rounds} rounds timed, "
            f"{time.perf_counter() - timing_started:.0f}s with the warm-up")
        for label, measured in timed.items():
            samples[label][batch_size] = measured.seconds
            rounds[label][batch_size] = measured.round_figures

    base_label = loaded[0].label
    ratios = {
        item.label: {
            b: p50_ratio_interval(rounds[base_label][b], rounds[item.label][b],
                                  config.confidence, config.resamples, seed=config.seed)
            for b in config.batch_sizes}
        for item in timed_models[1:] if item is not twin_item}

    qualities: dict[str, Quality] = {}
    if eval_data is not None:
        for item in loaded:
            if item is twin_item:  # the baseline's own accuracy, measured once is enough
                continue
            say(f"evaluating {item.label}: {metric.name} on {len(eval_data)} examples")
            value = evaluate(item.runner, eval_data, metric.name, EVAL_BATCH)
            qualities[item.label] = Quality(metric.name, value, metric.higher_is_better,
                                            len(eval_data), eval_data.source)

    from tfopt.optimizer.verify.equivalence import compare

    fidelities: dict[str, Fidelity] = {}
    feeds_list, feeds_source = _fidelity_feeds(ref_item.runner, config.seed, inputs, eval_data,
                                               generation)
    for item in loaded:
        if item is ref_item:
            continue
        report = compare(ref_item.runner, item.runner, inputs=feeds_list)
        fidelities[item.label] = Fidelity.of(report, feeds_source)

    files = {item.label: model_files(item.subject.path, item.runner.format) for item in loaded}
    measurements = [
        ModelMeasurement(
            label=item.label, role=item.subject.role, path=str(item.subject.path),
            format=item.runner.format, runtime=item.runner.runtime,
            num_threads=item.runner.num_threads,
            digest=model_digest(item.subject.path, files[item.label]),
            size_bytes=sum(f.stat().st_size for f in files[item.label]),
            load_seconds=item.load_seconds, first_call_seconds=item.first_call_seconds,
            rss_growth_bytes=item.growth.rss_growth_bytes,
            peak_rss_growth_bytes=item.growth.peak_rss_growth_bytes,
            peak_rss_exact=item.growth.peak_exact,
            latency={b: LatencySummary.of(s, b) for b, s in samples[item.label].items()},
            samples=samples[item.label], block_size=block_size,
            quality=qualities.get(item.label),
            fidelity=fidelities.get(item.label))
        for item in loaded]
    if inputs is not None:
        inputs_source = "supplied inputs"
    elif eval_data is not None:
        inputs_source = f"rows of {eval_data.source}"
    else:
        inputs_source = f"generated from the signature (seed {config.seed})"
        if generation.vocabularies:
            inputs_source += ("; tokens from the model's vocabulary, "
                              f"{OUT_OF_VOCABULARY_SHARE:.0%} out of it")
        if generation.int_ranges:
            inputs_source += "; ids drawn from " + ", ".join(
                f"{key} [{low}, {high})" for key, (low, high) in generation.int_ranges.items())
    settings = TimingRecord(
        batch_sizes=tuple(config.batch_sizes), warmup=config.warmup, min_runs=config.min_runs,
        min_seconds=config.min_seconds, max_runs=config.max_runs, confidence=config.confidence,
        resamples=config.resamples, rotate_order=True, signature=config.signature,
        inputs=inputs_source, block_size=block_size)
    candidates_end = len(timed_models) - (1 if twin_item else 0)
    return BenchmarkResult(
        baseline=measurements[0], candidates=tuple(measurements[1:candidates_end]),
        twin=measurements[candidates_end] if twin_item else None,
        reference=measurements[-1] if checked is not None else None, ratios=ratios,
        settings=settings, environment=capture_environment(runtime),
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        wall_seconds=time.perf_counter() - started, notes=runtime.notes)
