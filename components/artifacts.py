"""What each pipeline step returns: small, typed, JSON-able records of URIs, digests, verdicts.

These are what travels between Airflow tasks (XCom) and between ``tfopt step`` invocations; the
models themselves stay on disk or in object storage and are referred to by path or URI.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Self, TypeVar

from tfopt.optimizer.candidates.candidate import Candidate

T = TypeVar("T", bound="Record")


class Record:
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any] | Self) -> Self:
        if isinstance(data, cls):
            return data
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})  # type: ignore[call-arg]


@dataclass(frozen=True)
class PulledModel(Record):
    """The source model, on local disk, with the digest of its files."""

    uri: str
    path: str
    digest: str
    version: str | None = None  # registry version when pulled from models:/
    size_bytes: int | None = None  # on disk: what the later pods' memory is sized from


@dataclass(frozen=True)
class ChampionModel(Record):
    """The registry version a run is judged against, on local disk, as it records itself:
    its format and runtime, and the runtime settings tuning chose for it."""

    uri: str  # models:/name@alias
    version: str
    path: str  # what a runner loads: a SavedModel directory or the model file
    directory: str  # the whole downloaded version
    digest: str
    format: str  # savedmodel | tflite | ... (tfopt.optimizer.runtime.registry)
    runtime: str
    candidate: str | None = None  # what it was when it won (tfopt.candidate)
    num_threads: int | None = None  # a per-model runtime's thread count
    intra_op_threads: int | None = None  # TensorFlow's, as tuned (informative here)
    inter_op_threads: int | None = None
    # the digest of the source it was optimized from (its tfopt.source_digest tag); None when
    # the version does not record one (registered by hand)
    source_digest: str | None = None

    @property
    def label(self) -> str:
        return f"champion-v{self.version}"


@dataclass(frozen=True, kw_only=True)
class CandidateModel(Record, Candidate):
    """A candidate (:class:`tfopt.optimizer.candidates.candidate.Candidate`: what it is, where it is,
    what runs it) as the step that made it records it, with its provenance. The frozen and
    optimized float32 SavedModels were checked for equivalence before they were written; the
    ones derived from the optimized one (bf16, XLA, LiteRT, ONNX, OpenVINO: ``derived`` of the
    optimize step's output, see optimizer/candidates/build.py) are judged by the evaluation's
    accuracy instead."""

    # A frozen or optimized model is a float32 SavedModel that TensorFlow runs.
    target: str = "savedmodel"
    variant: str = "fp32"
    format: str = "savedmodel"
    runtime: str = "tensorflow"
    how_to_load: str = ""
    kind: str  # frozen | optimized | derived
    digest: str
    recipe: str | None = None
    equivalence: dict[str, Any] = field(default_factory=dict)
    trace: list[dict[str, Any]] = field(default_factory=list)
    derived: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {label, reason}

    @classmethod
    def made(cls, candidate: Candidate, **provenance: Any) -> CandidateModel:
        """``candidate``, a builder's, with what the step records of it (``kind``, ``digest``...)."""
        return cls(**{f.name: getattr(candidate, f.name) for f in fields(Candidate)},
                   **provenance)

    def candidate(self) -> Candidate:
        """The candidate alone, as the benchmark and evaluate records carry it so that the
        gate's table says what each is, not a guess."""
        return Candidate(**{f.name: getattr(self, f.name) for f in fields(Candidate)})


def candidate_models(*models: CandidateModel) -> list[CandidateModel]:
    """Every candidate to measure: each model, then the ones derived from it."""
    out = []
    for model in models:
        out.append(model)
        out.extend(CandidateModel.from_dict(d) for d in model.derived)
    return out


@dataclass(frozen=True)
class Candidates(Record):
    items: list[dict[str, Any]]

    def models(self) -> list[CandidateModel]:
        return [CandidateModel.from_dict(c) for c in self.items]


@dataclass(frozen=True)
class BenchmarkOutput(Record):
    result_path: str  # the BenchmarkResult JSON
    baseline_label: str
    baseline_role: str  # champion | input
    baseline_path: str
    baseline_format: str = "savedmodel"
    baseline_runtime: str = "tensorflow"
    candidate_paths: dict[str, str] = field(default_factory=dict)  # label -> model path
    candidate_tags: list[dict[str, str | None]] = field(default_factory=list)  # each .candidate()
    # The candidates measured (CandidateModel.to_dict()), carried on so that publish, at the
    # end, reads them from the gate's record instead of reaching back to freeze and optimize.
    candidates: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class EvaluationOutput(Record):
    result_path: str  # BenchmarkResult JSON with per-model accuracy filled in
    has_labels: bool
    metric: str
    scores: dict[str, float | None] = field(default_factory=dict)
    candidate_tags: list[dict[str, str | None]] = field(default_factory=list)  # benchmark's
    candidates: list[dict[str, Any]] = field(default_factory=list)  # benchmark's


@dataclass(frozen=True)
class GateOutput(Record):
    promote: bool
    chosen: str | None  # candidate label
    chosen_path: str | None
    summary: str
    verdict_path: str
    report_dir: str | None = None
    runtime_settings_path: str | None = None  # the chosen model's tuned threads and batch
    # The serving signature every candidate keeps (SignatureInfo.to_dict()): publish describes
    # the MLflow Models with it without loading TensorFlow.
    signature: dict[str, Any] | None = None
    # What publish logs as MLflow Models, by label: the chosen candidate and the others that
    # passed, fastest first; on a reject, the fastest candidate (the one the report explains).
    publishable: list[str] = field(default_factory=list)
    evaluation: dict[str, Any] = field(default_factory=dict)  # the EvaluationOutput judged
    # Its parts' costs, by part (Cost.to_dict()): {"tune": ...} when tuning ran
    part_costs: dict[str, dict] = field(default_factory=dict)


@dataclass(frozen=True)
class PublishOutput(Record):
    tracking_uri: str
    experiment_id: str
    run_id: str
    registered_model: str
    version: str | None  # the version registered: the champion, or a challenger
    alias: str  # the alias that version gets (mlflow.alias, or challenger)
    alias_moved: bool
    promote: bool
    model_uri: str | None = None  # the run's model as an MLflow Model: models:/<model id>
    logged_models: dict[str, str] = field(default_factory=dict)  # candidate label -> model id
