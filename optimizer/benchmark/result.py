"""The benchmark result: what the gate reads (``RESULT.json``) and the report renders.

Everything is plain data with ``to_dict``/``from_dict``, JSON both ways. The raw per-call
latencies are kept (``samples``: every timed call, round after round, ``settings.block_size`` per
round, so paired by round across models), so the gate can recompute the ratio intervals at its
own confidence level instead of trusting a number computed for another.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from tfopt.optimizer.benchmark.environment import Environment
from tfopt.optimizer.benchmark.stats import LatencySummary, RatioInterval, round_figures
from tfopt.optimizer.errors import BenchmarkResultError
from tfopt.optimizer.records import JsonRecord, in_order, record_error_line, record_to_dict

FORMAT_VERSION = 1

# Roles. The baseline is what a candidate must beat: the current production model (the model
# registry's champion) when there is one, else the unoptimized model the candidates came from.
CHAMPION = "champion"
UNOPTIMIZED_INPUT = "input"
CANDIDATE = "candidate"
# When the champion is the baseline, the unoptimized input is measured beside it (not timed):
# accuracy budgets and fidelity are anchored to it, so that small losses cannot pile up from one
# promotion to the next.
REFERENCE = "reference"
# The baseline loaded a second time and timed like a candidate: an A/A control inside every
# benchmark, whose discrepancy from the baseline a candidate must beat on top of the margin
# (tfopt.optimizer.benchmark.stats.twin_discrepancy).
TWIN = "twin"
BASELINE_ROLES = {CHAMPION: "the current production model (the registry's champion)",
                  UNOPTIMIZED_INPUT: "the unoptimized input model"}


@dataclass(frozen=True)
class Quality(JsonRecord):
    """A metric on labelled data."""

    metric: str
    value: float
    higher_is_better: bool
    examples: int
    data: str


@dataclass(frozen=True)
class Fidelity(JsonRecord):
    """How far a candidate's outputs are from the baseline's (see tfopt.optimizer.verify.equivalence)."""

    max_abs_diff: float
    max_rel_diff: float
    top1_agreement: float | None
    batches: int
    inputs: str  # "eval data" or "generated"
    # output values NaN / ±Inf where the input's are finite (written before: 0, never counted)
    nan_values: int = 0
    inf_values: int = 0

    @classmethod
    def of(cls, report, inputs: str) -> Fidelity:
        """From an :class:`~tfopt.optimizer.verify.equivalence.EquivalenceReport` on ``inputs``."""
        return cls(report.max_abs_diff, report.max_rel_diff, report.top1_agreement,
                   report.batches, inputs, report.nan_values, report.inf_values)


@dataclass(frozen=True)
class ModelMeasurement(JsonRecord):
    """One model's measurements. Memory figures: see tfopt.optimizer.benchmark.memory."""

    label: str
    role: str
    path: str
    digest: str
    size_bytes: int
    load_seconds: float
    first_call_seconds: float
    rss_growth_bytes: int | None
    peak_rss_growth_bytes: int | None
    peak_rss_exact: bool
    latency: dict[int, LatencySummary]  # batch size -> summary
    # batch size -> per-call seconds, round after round (TimingRecord.block_size per round)
    samples: dict[int, tuple[float, ...]]
    quality: Quality | None = None
    # against the accuracy reference (the unoptimized input); None for the reference itself
    fidelity: Fidelity | None = None
    format: str = "savedmodel"  # what ran it: tfopt.optimizer.runtime.registry
    runtime: str = "tensorflow"
    num_threads: int | None = None  # the runtime's own thread count; None: the process's
    # the baseline's samples from the process this candidate was timed in, when the benchmark
    # ran in groups (tfopt.optimizer.benchmark.memory_groups); None: the result's baseline's
    baseline_samples: dict[int, tuple[float, ...]] | None = None
    # timed calls per round in ``samples`` (and ``baseline_samples``); None: the result's
    # settings.block_size (results written before blocks were scaled to the call time)
    block_size: int | None = None
    # A champion's: the digest of the source model it was optimized from, as its registry
    # version records it (``tfopt.source_digest``); None when unknown or not a champion. The
    # gate compares it with the input's, to know whether the two are the same model.
    source_digest: str | None = None

    def to_dict(self) -> dict:
        data = record_to_dict(self)
        if self.baseline_samples is None:
            del data["baseline_samples"]  # written only when the benchmark ran in groups
        if self.source_digest is None:
            del data["source_digest"]  # written only for a champion that records it
        return in_order(data, _MEASUREMENT_KEYS)


# RESULT.json's order of a measurement's keys, older than the order of the fields (those with a
# default come last).
_MEASUREMENT_KEYS = (
    "label", "role", "path", "digest", "format", "runtime", "num_threads", "size_bytes",
    "load_seconds", "first_call_seconds", "rss_growth_bytes", "peak_rss_growth_bytes",
    "peak_rss_exact", "block_size", "latency", "samples", "quality", "fidelity",
    "baseline_samples", "source_digest")


@dataclass(frozen=True)
class TimingRecord(JsonRecord):
    """How the timing was done, as recorded in a result (``settings`` in RESULT.json): the
    :class:`~tfopt.optimizer.benchmark.settings.BenchmarkConfig` it ran with, and what the run decided
    (the inputs' source, the block size scaled to the call time)."""

    batch_sizes: tuple[int, ...]
    warmup: int
    min_runs: int
    min_seconds: float
    max_runs: int
    confidence: float
    resamples: int
    rotate_order: bool
    signature: str
    inputs: str  # where the timed inputs came from
    # consecutive timed calls per model per round; 1 (one call, no untimed call) in results
    # written before blocks
    block_size: int = 1


@dataclass(frozen=True)
class BenchmarkResult(JsonRecord):
    baseline: ModelMeasurement
    candidates: tuple[ModelMeasurement, ...]
    ratios: dict[str, dict[int, RatioInterval]]  # candidate label -> batch size -> p50 ratio
    settings: TimingRecord
    environment: Environment
    created: str
    wall_seconds: float
    format_version: int = FORMAT_VERSION
    notes: tuple[str, ...] = field(default=())
    reference: ModelMeasurement | None = None  # the input, when the baseline is the champion
    twin: ModelMeasurement | None = None  # the baseline's second load, timed (TWIN)

    @property
    def models(self) -> tuple[ModelMeasurement, ...]:
        """The timed models: the baseline, then the candidates."""
        return (self.baseline, *self.candidates)

    @property
    def accuracy_reference(self) -> ModelMeasurement:
        """What accuracy drops and fidelity are measured against: the unoptimized input."""
        return self.reference or self.baseline

    @property
    def measured(self) -> tuple[ModelMeasurement, ...]:
        """Every model measured: the reference (when apart from the baseline), then
        :attr:`models`."""
        return ((self.reference,) if self.reference else ()) + self.models

    def round_figures(self, model: ModelMeasurement, batch_size: int):
        """``model``'s figure per round at ``batch_size`` (the median of its block), paired by
        index with every other timed model's: what the ratio intervals resample."""
        return round_figures(model.samples[batch_size], self.block_size(model))

    def block_size(self, model: ModelMeasurement) -> int:
        """Timed calls per round in ``model``'s samples."""
        return model.block_size or self.settings.block_size

    def paired_baseline_samples(self, candidate: ModelMeasurement) -> dict:
        """The baseline's samples ``candidate`` was timed beside: its group's when the
        benchmark ran in groups, else the baseline's own."""
        if candidate.baseline_samples is not None:
            return candidate.baseline_samples
        return self.baseline.samples

    def candidate(self, label: str) -> ModelMeasurement:
        for c in self.candidates:
            if c.label == label:
                return c
        raise KeyError(label)

    def to_dict(self) -> dict:
        # the measurements in their own stored form (ModelMeasurement.to_dict)
        data = {**record_to_dict(self), "candidates": [c.to_dict() for c in self.candidates],
                **{role: None if m is None else m.to_dict() for role, m in (
                    ("baseline", self.baseline), ("reference", self.reference),
                    ("twin", self.twin))}}
        return in_order(data, _RESULT_KEYS)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, path: str | os.PathLike) -> Path:
        """Write the JSON next to ``path`` first, then rename, so a reader never sees half."""
        from tfopt.optimizer.files.atomic import atomic_file

        path = Path(path)
        with atomic_file(path, overwrite=True) as staging:
            staging.write_text(self.to_json())
        return path


# RESULT.json's order of keys: what it is first, the models after.
_RESULT_KEYS = ("format_version", "created", "wall_seconds", "settings", "environment", "baseline",
                "candidates", "reference", "twin", "ratios", "notes")


def load_result(path: str | os.PathLike) -> BenchmarkResult:
    """Read a RESULT.json; anything wrong with it is one :class:`BenchmarkResultError` line."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchmarkResultError(f"no such benchmark result: {path}") from None
    except IsADirectoryError:
        raise BenchmarkResultError(f"{path} is a directory, not a benchmark RESULT.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchmarkResultError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BenchmarkResultError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or "format_version" not in data:
        raise BenchmarkResultError(f"{path} is not a tfopt benchmark result "
                                   f"(no 'format_version' field)")
    if data["format_version"] != FORMAT_VERSION:
        raise BenchmarkResultError(f"{path} has result format {data['format_version']!r}; this "
                                   f"tfopt reads format {FORMAT_VERSION}")
    try:
        result = BenchmarkResult.from_dict(data)
    except ValidationError as exc:
        problem = record_error_line(exc)
        raise BenchmarkResultError(
            f"{path}: benchmark result is {problem}" if problem.startswith("missing")
            else f"{path}: malformed benchmark result: {problem}") from None
    except KeyError as exc:
        raise BenchmarkResultError(f"{path}: benchmark result is missing field {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise BenchmarkResultError(f"{path}: malformed benchmark result: {exc}") from None
    if not result.candidates:
        raise BenchmarkResultError(f"{path}: the result holds no candidate")
    return result
