"""The quality gate: does a candidate replace the baseline? TFX-Evaluator-style "blessing".

The gate reads a :class:`~tfopt.optimizer.benchmark.result.BenchmarkResult` and a :class:`GateConfig`
and returns, per candidate, a verdict listing every check with the measured value, the
threshold, pass/fail and a one-line reason. A candidate is **promoted only if every check
passes**; a check that cannot be evaluated (no data for it) fails. Among promoted candidates the
one with the largest measured speedup is chosen, unless a more precise one is indistinguishable
from it (:mod:`tfopt.optimizer.gate.near_ties`).

The baseline is what the candidate must beat: the current production model (the registry's
champion) when there is one, else the unoptimized input model. The result records which.

Checks, in order:

``latency``
    At the gate's batch size (``latency_batch_size``, default the smallest measured), the
    candidate/baseline ratio ``r`` (the median of per-round ratios; below 1 = faster) must
    show a speedup of at least ``min_speedup`` *with confidence*: the upper bound of the
    two-sided ``confidence`` interval of ``r`` must be below ``1 / min_speedup``, and the point
    estimate ``1 / r`` at least ``min_speedup``. (The interval is recomputed here from the raw paired samples, by the same
    block bootstrap as the benchmark, at this config's ``confidence``.) Requiring the interval's
    bound to clear ``1 / min_speedup``, not merely 1, is deliberate: "at least 5 % faster, and
    we are 97.5 % sure it is at least 5 %", not "looks 5 % faster and is probably not slower".
    A model benchmarked against an identical copy has a true ratio of 1; promoting it needs the
    interval to sit wholly below 0.952, a miss of the truth by more than 5 %, which a correct
    interval allows with probability well under 2.5 %, and the 5 % margin also absorbs small
    systematic effects the bootstrap cannot see (memory placement, load order). When the
    benchmark timed a *twin* (the baseline loaded a second time and timed like a candidate,
    the default), the bound is tightened by the twin's discrepancy ``D`` (the twin's ratio to
    the baseline, or its inverse, whichever is above 1): the upper bound must be below
    ``1 / (min_speedup * D)``. Two
    loads of one model were measured up to 9 % apart, and under contention an A/A interval
    lay wholly below 0.952; the twin measures both effects in the run itself
    (:func:`tfopt.optimizer.benchmark.stats.twin_discrepancy`). At least
    ``min_rounds`` timed rounds are required (a round is one block of ``block_size``
    consecutive calls of every model; :mod:`tfopt.optimizer.benchmark.interleaved`).
``latency_batch_<n>``
    At every other measured batch size, the candidate must not be shown slower: the upper bound
    of the ratio's interval must be at most ``max_slowdown`` (1.05 = "not more than 5 % slower").
``accuracy_drop_abs`` / ``accuracy_drop_rel``
    Accuracy is measured against the *unoptimized input* of this run, also when the baseline
    is the champion (the result's ``accuracy_reference``): budgets anchored to the champion
    alone would let a small loss pile up from one promotion to the next (the champion's own
    checks, below, are on top of these). With labelled data, the
    metric's drop (input minus candidate for a higher-is-better metric such as top-1,
    candidate minus input for an error such as MSE) must be at most ``max_accuracy_drop_abs``,
    and relative to the input's value at most ``max_accuracy_drop_rel``; a budget set to null
    is not checked. Without labels, accuracy is bounded through fidelity to the input: a
    candidate that agrees with the input's top-1 on a share ``a`` of the inputs cannot lose
    more than ``1 - a`` of accuracy, so ``1 - a <= max_accuracy_drop_abs`` is checked. Outputs that are not class scores have no
    top-1; they need ``max_output_rel_error`` (max relative output error against the baseline).
    When neither labels nor a usable fidelity bound exist, the check fails: an unverified
    accuracy never passes.
``champion_accuracy_drop_abs`` / ``champion_accuracy_drop_rel`` / ``champion_comparison``
    Beside the input's budget, a candidate is judged against what it would replace. With a
    champion as the baseline and labelled data, the candidate's metric may be below the
    champion's (each measured in its own runtime) by at most the same budgets: a faster model
    far worse than production is not promoted because it is as bad as its own input (a constant
    model against an accurate champion). Without labels, accuracy cannot be compared with the
    champion; when the champion was optimized from this same input (its version's source digest,
    or its own digest, is the input's) fidelity to the input stands for it, and otherwise the
    ``champion_comparison`` check fails unless ``allow_latency_only_replacement`` is set.
``finite_outputs``
    Present only when the candidate answers NaN or Inf where the input's outputs are finite, and
    then it fails, naming them: NaN never equals NaN (:mod:`tfopt.optimizer.verify.finite`).
``differs_from_baseline``
    A candidate whose files are the baseline's (the same digest: the champion's own LiteRT file
    rebuilt by a scheduled run on the same source) is never promoted, however it times:
    promoting it changes nothing, and two instances of one small model in one process were
    measured up to 9% apart, a difference the round bootstrap cannot see.
``size`` / ``peak_rss``
    Optional: the candidate's size on disk at most ``max_size_bytes``; the process's peak RSS
    growth while loading and first calling it at most ``max_peak_rss_bytes``.

``tfopt gate RESULT.json`` exits 0 when a candidate is promoted and 3 when none is.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field

from tfopt.optimizer.benchmark.result import CHAMPION, BenchmarkResult, ModelMeasurement, Quality
from tfopt.optimizer.benchmark.settings import BenchmarkConfig
from tfopt.optimizer.benchmark.stats import (
    RatioInterval,
    head_to_head_interval,
    p50_ratio_interval,
    promotion_bound,
    round_figures,
    twin_discrepancy,
    unpaired_ratio_interval,
)
from tfopt.optimizer.errors import (
    EXIT_GATE_REJECTED,
    EXIT_OK,
    GateConfigError,
    validation_error_line,
)
from tfopt.optimizer.gate.near_ties import choose_among_promoted
from tfopt.optimizer.records import JsonRecord, field_of, in_order, record_to_dict
from tfopt.optimizer.verify.finite import nonfinite_text

EXIT_PROMOTE = EXIT_OK
EXIT_REJECT = EXIT_GATE_REJECTED


class GateConfig(BaseModel):
    """Gate thresholds. A null budget is not checked; see the module docstring for semantics."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_speedup: float = Field(1.05, ge=1.0, description="required p50 speedup at the gate's "
                                                         "batch size, shown with confidence")
    # One level for the benchmark's intervals (when to stop timing) and the gate's: the
    # benchmark's own setting, so the two cannot be configured apart.
    confidence: float = field_of(BenchmarkConfig, "confidence",
                                 description="two-sided level of the speedup intervals the "
                                             "benchmark times to and the gate decides at")
    latency_batch_size: int | None = Field(None, ge=1, description="default: smallest measured")
    max_slowdown: float = Field(1.05, ge=1.0, description="at other batch sizes: upper bound "
                                                          "of the p50 ratio's interval")
    min_rounds: int = Field(20, ge=2, description="fewest timed rounds the gate accepts (a "
                                                  "round: one block of calls of each model)")
    max_accuracy_drop_abs: float | None = Field(
        0.01, ge=0.0, description="largest accuracy drop accepted, absolute (0.01 = one point), "
                                  "against the input; without labels, 1 - top-1 agreement")
    max_accuracy_drop_rel: float | None = Field(
        None, ge=0.0, description="largest drop of the metric relative to the input's value "
                                  "(with labels); null: not checked")
    max_output_rel_error: float | None = Field(None, ge=0.0, description="fidelity bound for "
                                               "outputs without top-1, when there are no labels")
    max_size_bytes: int | None = Field(None, ge=1, description="largest size on disk; null: "
                                                               "not checked")
    max_peak_rss_bytes: int | None = Field(
        None, ge=1, description="largest growth of the process's peak memory while loading and "
                                "first calling the model; null: not checked")
    allow_latency_only_replacement: bool = Field(
        False, description="without labelled data, let a candidate optimized from another "
                           "source model than the champion's replace the champion on latency "
                           "alone (their accuracies are never compared); off: such a candidate "
                           "is rejected")


def gate_config_from_dict(data: dict | None, source: str = "gate config") -> GateConfig:
    if data is None:
        return GateConfig()
    if not isinstance(data, dict):
        raise GateConfigError(f"{source}: a gate config is a mapping of keys to values, "
                              f"got {type(data).__name__}")
    try:
        return GateConfig.model_validate(data)
    except ValidationError as exc:
        raise GateConfigError(validation_error_line(exc, source, "gate config",
                                                    GateConfig.model_fields)) from None


def load_gate_config(path: str | os.PathLike) -> GateConfig:
    """A YAML file of :class:`GateConfig` keys (an empty file means all defaults)."""
    from tfopt.optimizer.files.yaml_files import read_yaml_file

    data = read_yaml_file(path, "gate config file", GateConfigError)
    return gate_config_from_dict(data, str(path))


@dataclass(frozen=True)
class Check(JsonRecord):
    name: str
    passed: bool
    measured: float | None
    threshold: float | None
    measured_text: str
    threshold_text: str
    reason: str

    def line(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        return (f"{status}  {self.name:<20} measured {self.measured_text:<24} "
                f"threshold {self.threshold_text:<14} {self.reason}")


@dataclass(frozen=True)
class Verdict(JsonRecord):
    candidate: str
    baseline: str
    baseline_role: str
    promote: bool
    speedup: float | None  # point estimate at the gate's batch size
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def summary(self) -> str:
        if self.promote:
            return f"PROMOTE {self.candidate}: all {len(self.checks)} checks passed"
        return (f"REJECT {self.candidate}: " + "; ".join(c.reason for c in self.failed))


@dataclass(frozen=True)
class GateDecision:
    verdicts: tuple[Verdict, ...]
    chosen: str | None  # the promoted candidate with the largest speedup; None: keep baseline
    config: GateConfig
    latency_batch_size: int
    intervals: dict[str, dict[int, RatioInterval]]  # as recomputed at config.confidence
    twin: dict[int, RatioInterval] = field(default_factory=dict)  # the baseline's twin's
    # what each candidate was compared with, in one line (:func:`comparisons`)
    comparisons: str = ""

    @computed_field  # written first, for the record's readers
    @property
    def promote(self) -> bool:
        return self.chosen is not None

    @property
    def exit_code(self) -> int:
        return EXIT_PROMOTE if self.promote else EXIT_REJECT

    def verdict(self, candidate: str) -> Verdict:
        return next(v for v in self.verdicts if v.candidate == candidate)

    def to_dict(self) -> dict:
        return in_order(record_to_dict(self), _DECISION_KEYS)


# The verdict's JSON order (verdict.json, the report): the decision before what it rests on.
_DECISION_KEYS = ("promote", "chosen", "latency_batch_size", "comparisons", "config", "verdicts",
                  "intervals", "twin")


def _pct(confidence: float) -> str:
    return f"{confidence * 100:g}%"


def _speedup_ci(interval: RatioInterval) -> str:
    low = 1 / interval.high if interval.high > 0 else math.inf
    high = 1 / interval.low if interval.low > 0 else math.inf
    return f"{_pct(interval.confidence)} CI {low:.3f}x-{high:.3f}x"


def _latency_check(interval: RatioInterval, batch: int, config: GateConfig,
                   twin: RatioInterval | None = None) -> Check:
    bound = promotion_bound(config.min_speedup, twin)
    discrepancy = twin_discrepancy(twin)
    speedup = interval.speedup
    measured_text = f"{speedup:.3f}x ({_speedup_ci(interval)})"
    threshold_text = f">= {config.min_speedup:g}x"
    if twin is not None:
        threshold_text += f" x twin {discrepancy:.3f}"
    if interval.rounds < config.min_rounds:
        return Check("latency", False, speedup, config.min_speedup, measured_text,
                     threshold_text, f"only {interval.rounds} timed rounds at batch {batch}; "
                     f"the gate needs at least {config.min_rounds}")
    if speedup < 1:
        reason = (f"latency regressed: {1 / speedup:.2f}x slower than the baseline at batch "
                  f"{batch} (p50), needs to be {config.min_speedup:g}x faster")
        return Check("latency", False, speedup, config.min_speedup, measured_text,
                     threshold_text, reason)
    if speedup < config.min_speedup:
        reason = (f"latency improvement too small: {speedup:.3f}x at batch {batch} (p50), "
                  f"below the required {config.min_speedup:g}x")
        return Check("latency", False, speedup, config.min_speedup, measured_text,
                     threshold_text, reason)
    twin_text = (f", beyond the {discrepancy:.3f}x the baseline's twin (a second load of it) "
                 f"measured apart from it" if twin is not None else "")
    if interval.high >= bound:
        reason = (f"latency improvement not shown to be real: {speedup:.3f}x at batch {batch} "
                  f"but the {_speedup_ci(interval)} reaches below {config.min_speedup:g}x"
                  f"{twin_text}")
        return Check("latency", False, speedup, config.min_speedup, measured_text,
                     threshold_text, reason)
    return Check("latency", True, speedup, config.min_speedup, measured_text, threshold_text,
                 f"{speedup:.2f}x faster at batch {batch} (p50), at least "
                 f"{config.min_speedup:g}x with {_pct(interval.confidence)} confidence"
                 f"{twin_text}")


def _no_regression_check(interval: RatioInterval, batch: int, config: GateConfig) -> Check:
    name = f"latency_batch_{batch}"
    measured_text = f"{interval.speedup:.3f}x ({_speedup_ci(interval)})"
    threshold_text = f"<= {config.max_slowdown:g}x slower"
    worst = interval.high
    if interval.rounds < config.min_rounds:
        return Check(name, False, worst, config.max_slowdown, measured_text, threshold_text,
                     f"only {interval.rounds} timed rounds at batch {batch}; the gate needs "
                     f"at least {config.min_rounds}")
    if worst > config.max_slowdown:
        return Check(name, False, worst, config.max_slowdown, measured_text, threshold_text,
                     f"latency may regress at batch {batch}: p50 up to {worst:.2f}x the "
                     f"baseline's ({_pct(interval.confidence)} bound), more than "
                     f"{config.max_slowdown:g}x")
    return Check(name, True, worst, config.max_slowdown, measured_text, threshold_text,
                 f"no regression at batch {batch}: p50 at most {worst:.2f}x the baseline's "
                 f"({_pct(interval.confidence)} bound)")


def _accuracy_checks(reference: ModelMeasurement, candidate: ModelMeasurement,
                     config: GateConfig) -> list[Check]:
    """``reference``: the unoptimized input (the baseline itself when it is the input)."""
    if reference.quality is not None and candidate.quality is not None:
        base, cand = reference.quality, candidate.quality
        drop = _drop(base, cand)
        metric = base.metric
        checks = []
        if config.max_accuracy_drop_abs is None and config.max_accuracy_drop_rel is None:
            return [Check("accuracy_drop_abs", True, drop, None, f"{drop:+.4f}", "not set",
                          f"no accuracy budget configured; {metric} {base.value:.4f} -> "
                          f"{cand.value:.4f}")]
        if config.max_accuracy_drop_abs is not None:
            ok = drop <= config.max_accuracy_drop_abs
            reason = (f"{metric} {base.value:.4f} -> {cand.value:.4f} (drop {drop:.4f}) "
                      f"{'within' if ok else 'exceeds'} the budget of "
                      f"{config.max_accuracy_drop_abs:g}")
            reason = reason if ok else f"accuracy dropped too much: {reason}"
            checks.append(Check("accuracy_drop_abs", ok, drop, config.max_accuracy_drop_abs,
                                f"{drop:.4f}", f"<= {config.max_accuracy_drop_abs:g}", reason))
        if config.max_accuracy_drop_rel is not None:
            rel = drop / abs(base.value) if base.value else (0.0 if drop <= 0 else math.inf)
            ok = rel <= config.max_accuracy_drop_rel
            reason = (f"{metric} relative drop {rel:.2%} {'within' if ok else 'exceeds'} the "
                      f"budget of {config.max_accuracy_drop_rel:.2%}")
            reason = reason if ok else f"accuracy dropped too much: {reason}"
            checks.append(Check("accuracy_drop_rel", ok, rel, config.max_accuracy_drop_rel,
                                f"{rel:.4%}", f"<= {config.max_accuracy_drop_rel:.2%}", reason))
        return checks

    fidelity = candidate.fidelity
    if fidelity is None:
        return [Check("accuracy", False, None, None, "not measured", "-",
                      "no accuracy evidence: no labelled data and no fidelity measurement")]
    if fidelity.top1_agreement is not None and config.max_accuracy_drop_abs is not None:
        bound = 1.0 - fidelity.top1_agreement
        ok = bound <= config.max_accuracy_drop_abs
        reason = (f"no labelled data: top-1 agreement with the input "
                  f"{fidelity.top1_agreement:.4f} bounds the accuracy drop at {bound:.4f}, "
                  f"{'within' if ok else 'beyond'} the budget of "
                  f"{config.max_accuracy_drop_abs:g}")
        reason = reason if ok else f"accuracy may have dropped too much: {reason}"
        return [Check("accuracy_drop_abs", ok, bound, config.max_accuracy_drop_abs,
                      f"<= {bound:.4f}", f"<= {config.max_accuracy_drop_abs:g}", reason)]
    if config.max_output_rel_error is not None:
        ok = fidelity.max_rel_diff <= config.max_output_rel_error
        reason = (f"no labelled data: max relative output error against the input "
                  f"{fidelity.max_rel_diff:.3g} {'within' if ok else 'exceeds'} "
                  f"{config.max_output_rel_error:g}")
        reason = reason if ok else f"outputs diverge too much: {reason}"
        return [Check("output_rel_error", ok, fidelity.max_rel_diff, config.max_output_rel_error,
                      f"{fidelity.max_rel_diff:.3g}", f"<= {config.max_output_rel_error:g}",
                      reason)]
    return [Check("accuracy", False, None, None, "not measured", "-",
                  "accuracy unverified: no labelled data, and no top-1 agreement bound applies "
                  "(set max_output_rel_error, or benchmark with --eval-data)")]


def _drop(base: Quality, cand: Quality) -> float:
    """How far ``cand`` is worse than ``base`` (NaN, a metric of NaN outputs, is worse than
    any budget)."""
    drop = base.value - cand.value if base.higher_is_better else cand.value - base.value
    return math.inf if math.isnan(drop) else drop


def _champion_checks(result: BenchmarkResult, candidate: ModelMeasurement,
                     config: GateConfig) -> list[Check]:
    """The candidate against the champion it would replace (none when the baseline is the
    input): its accuracy within the budget of the champion's with labels; without them, only
    when the champion was made from this input, or the config allows latency alone."""
    champion, source = result.baseline, result.accuracy_reference
    if champion.role != CHAMPION or source is champion:
        return []  # no champion, or accuracy is already measured against it (tfopt gate)
    if candidate.quality is not None:
        if champion.quality is None:
            return [Check("champion_accuracy", False, None, None, "not measured", "-",
                          f"the champion {champion.label}'s accuracy was not measured on the "
                          f"labelled data, so the candidate cannot be compared with it")]
        base, cand = champion.quality, candidate.quality
        drop = _drop(base, cand)
        checks = []
        for name, budget, value, text in (
                ("champion_accuracy_drop_abs", config.max_accuracy_drop_abs, drop,
                 f"{drop:.4f}"),
                ("champion_accuracy_drop_rel", config.max_accuracy_drop_rel,
                 drop / abs(base.value) if base.value else (0.0 if drop <= 0 else math.inf),
                 None)):
            if budget is None:
                continue
            ok = value <= budget
            shown = text or f"{value:.2%}"
            reason = (f"{base.metric} {cand.value:.4f} against the champion {champion.label}'s "
                      f"{base.value:.4f} (drop {shown}) {'within' if ok else 'exceeds'} the "
                      f"budget of {budget:g}")
            checks.append(Check(name, ok, value, budget, shown, f"<= {budget:g}",
                                reason if ok else f"worse than the champion: {reason}"))
        return checks
    if same_source(result):
        return [Check("champion_comparison", True, None, None, "same source", "-",
                      f"no labelled data: the champion {champion.label} was optimized from "
                      f"this same input, so fidelity to the input bounds both")]
    recorded = (f"from {champion.source_digest[:19]}..." if champion.source_digest
                else "from a source it does not record")
    if config.allow_latency_only_replacement:
        return [Check("champion_comparison", True, None, None, "not compared",
                      "latency only", f"accuracy not compared with the champion "
                      f"{champion.label} (no labelled data; it was optimized {recorded}, this "
                      f"input is {source.digest[:19]}...): replaced on latency alone, as "
                      f"allow_latency_only_replacement allows")]
    return [Check("champion_comparison", False, None, None, "not compared", "labelled data",
                  f"accuracy cannot be compared with the champion {champion.label}: no labelled "
                  f"data, and it was optimized {recorded}, not from this input "
                  f"({source.digest[:19]}...); give labelled evaluation data, or set "
                  f"allow_latency_only_replacement to replace it on latency alone")]


def same_source(result: BenchmarkResult) -> bool:
    """Whether the champion baseline was made from this run's input: its recorded source digest
    is the input's, or it is the input itself (a version registered by hand)."""
    champion, source = result.baseline, result.accuracy_reference
    return source.digest in (champion.source_digest, champion.digest)


def _finite_check(candidate: ModelMeasurement) -> list[Check]:
    fidelity = candidate.fidelity
    if fidelity is None or not (fidelity.nan_values or fidelity.inf_values):
        return []
    broken = nonfinite_text(fidelity.nan_values, fidelity.inf_values)
    return [Check("finite_outputs", False, fidelity.nan_values + fidelity.inf_values, 0,
                  broken, "none", f"outputs not finite: {broken} where the input's outputs "
                  f"are finite (on {_inputs_text(fidelity.inputs)})")]


def _inputs_text(inputs: str) -> str:
    """What a fidelity was measured on (``Fidelity.inputs``), as a sentence says it."""
    return {"generated": "generated inputs", "supplied": "supplied inputs"}.get(inputs, inputs)


def comparisons(result: BenchmarkResult, config: GateConfig) -> str:
    """What the candidates were compared with, in one line, for the report and the registry:
    latency against the baseline; accuracy against the input, and against the champion with
    labels, or why not."""
    baseline, source = result.baseline, result.accuracy_reference
    measured = next((c.quality for c in result.candidates if c.quality is not None), None)
    if measured is not None:
        how = f"{measured.metric} on labelled data ({measured.examples} examples)"
    else:
        inputs = next((c.fidelity.inputs for c in result.candidates if c.fidelity), "inputs")
        how = f"agreement with its outputs on {_inputs_text(inputs)}"
    parts = [f"latency against {baseline.label} ({baseline.role})",
             f"accuracy against {source.label} (the input: {how})"]
    if baseline.role == CHAMPION and source is not baseline:
        if measured is not None:
            parts.append(f"accuracy against {baseline.label} (the champion: {how})")
        elif same_source(result):
            parts.append(f"not against {baseline.label}'s accuracy: it was optimized from the "
                         f"same input, no labelled data")
        elif config.allow_latency_only_replacement:
            parts.append(f"not against {baseline.label}'s accuracy: no labelled data, another "
                         f"source model; latency-only replacement allowed")
        else:
            parts.append(f"not against {baseline.label}'s accuracy: no labelled data, another "
                         f"source model, so no candidate may replace it")
    return "; ".join(parts)


def _limit_checks(candidate: ModelMeasurement, config: GateConfig) -> list[Check]:
    checks = []
    if config.max_size_bytes is not None:
        ok = candidate.size_bytes <= config.max_size_bytes
        checks.append(Check(
            "size", ok, candidate.size_bytes, config.max_size_bytes,
            f"{candidate.size_bytes} B", f"<= {config.max_size_bytes} B",
            f"size on disk {candidate.size_bytes} bytes "
            f"{'within' if ok else 'exceeds'} the limit of {config.max_size_bytes}"))
    if config.max_peak_rss_bytes is not None:
        peak = candidate.peak_rss_growth_bytes
        if peak is None:
            checks.append(Check("peak_rss", False, None, config.max_peak_rss_bytes,
                                "not measured", f"<= {config.max_peak_rss_bytes} B",
                                "peak RSS was not measured on this platform"))
        else:
            ok = peak <= config.max_peak_rss_bytes
            checks.append(Check(
                "peak_rss", ok, peak, config.max_peak_rss_bytes, f"{peak} B",
                f"<= {config.max_peak_rss_bytes} B",
                f"peak RSS growth while loading {peak} bytes "
                f"{'within' if ok else 'exceeds'} the limit of {config.max_peak_rss_bytes}"))
    return checks


def _intervals(result: BenchmarkResult, model: ModelMeasurement,
               confidence: float) -> dict[int, RatioInterval]:
    base = result.paired_baseline_samples(model)
    out = {}
    for batch, seconds in model.samples.items():
        if batch not in base or len(base[batch]) != len(seconds):
            continue
        stored = result.ratios.get(model.label, {}).get(batch)
        out[batch] = p50_ratio_interval(
            round_figures(base[batch], result.block_size(model)),
            result.round_figures(model, batch), confidence,
            resamples=stored.resamples if stored else result.settings.resamples,
            block=stored.block if stored else None)
    return out


def _head_to_head(result: BenchmarkResult, batch: int, confidence: float):
    """``other / fastest`` at ``batch``: for two candidates timed in the same rounds (beside the
    same baseline samples) the paired interval per round
    (:func:`~tfopt.optimizer.benchmark.stats.head_to_head_interval`, as the harness's adaptive
    stopping computes it); for two timed in different groups, their ratios to their own
    group's baseline, resampled independently
    (:func:`~tfopt.optimizer.benchmark.stats.unpaired_ratio_interval`). None when either was not
    timed at ``batch``."""
    def interval(fastest: str, other: str) -> RatioInterval | None:
        a, b = result.candidate(fastest), result.candidate(other)
        if batch not in a.samples or batch not in b.samples:
            return None
        base_a, base_b = result.paired_baseline_samples(a), result.paired_baseline_samples(b)
        if base_a == base_b and len(a.samples[batch]) == len(b.samples[batch]):
            return head_to_head_interval(result.round_figures(a, batch),
                                         result.round_figures(b, batch), confidence,
                                         resamples=result.settings.resamples)
        if batch not in base_a or batch not in base_b:
            return None
        return unpaired_ratio_interval(
            round_figures(base_a[batch], result.block_size(a)), result.round_figures(a, batch),
            round_figures(base_b[batch], result.block_size(b)), result.round_figures(b, batch),
            confidence, resamples=result.settings.resamples)
    return interval


def recompute_intervals(result: BenchmarkResult,
                        confidence: float) -> dict[str, dict[int, RatioInterval]]:
    """The ratio intervals at ``confidence``, from the result's raw paired samples."""
    return {candidate.label: _intervals(result, candidate, confidence)
            for candidate in result.candidates}


def twin_intervals(result: BenchmarkResult, confidence: float) -> dict[int, RatioInterval]:
    """The baseline's twin against the baseline, per batch size; empty when none was timed."""
    return _intervals(result, result.twin, confidence) if result.twin is not None else {}


def evaluate_gate(result: BenchmarkResult, config: GateConfig | None = None, *,
                  precisions: Mapping[str, str] | None = None) -> GateDecision:
    """Each candidate's verdict, and the one to serve among those promoted
    (:func:`~tfopt.optimizer.gate.near_ties.choose_among_promoted`, ``precisions``: label -> the
    candidate record's :attr:`~tfopt.optimizer.candidates.candidate.Candidate.precision`)."""
    config = config or GateConfig()
    batch_sizes = sorted(result.settings.batch_sizes)
    batch = config.latency_batch_size or batch_sizes[0]
    intervals = recompute_intervals(result, config.confidence)
    twin = twin_intervals(result, config.confidence)
    verdicts = []
    for candidate in result.candidates:
        checks: list[Check] = []
        by_batch = intervals.get(candidate.label, {})
        if batch in by_batch:
            checks.append(_latency_check(by_batch[batch], batch, config, twin.get(batch)))
        else:
            checks.append(Check("latency", False, None, config.min_speedup, "not measured",
                                f">= {config.min_speedup:g}x",
                                f"latency was not measured at batch {batch}"))
        for other in batch_sizes:
            if other != batch and other in by_batch:
                checks.append(_no_regression_check(by_batch[other], other, config))
        if candidate.digest == result.baseline.digest:
            checks.append(Check("differs_from_baseline", False, None, None, candidate.digest[:19],
                                "another model", f"identical to the baseline "
                                f"{result.baseline.label} (same files): nothing to promote"))
        checks.extend(_finite_check(candidate))
        checks.extend(_accuracy_checks(result.accuracy_reference, candidate, config))
        checks.extend(_champion_checks(result, candidate, config))
        checks.extend(_limit_checks(candidate, config))
        verdicts.append(Verdict(
            candidate=candidate.label, baseline=result.baseline.label,
            baseline_role=result.baseline.role, promote=all(c.passed for c in checks),
            speedup=by_batch[batch].speedup if batch in by_batch else None,
            checks=tuple(checks)))
    promoted = [v for v in verdicts if v.promote]
    chosen = choose_among_promoted(promoted, intervals, batch, precisions,
                                   _head_to_head(result, batch, config.confidence))
    return GateDecision(tuple(verdicts), chosen, config, batch, intervals, twin,
                        comparisons(result, config))
