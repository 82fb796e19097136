"""Choose among candidates: all measured against the baseline in one process, the gate decides.

Every candidate (SavedModel or LiteRT, see :mod:`tfopt.optimizer.candidates.build`) goes through the same
benchmark harness as the baseline, interleaved, and through the same evaluation (held-out
accuracy with labelled data, agreement with the baseline's top-1 without). The gate
(:mod:`tfopt.optimizer.gate.verdict`) then promotes the candidates that pass every check, the accuracy budget
included, and chooses among them with :func:`tfopt.optimizer.gate.near_ties.choose_among_promoted`. A candidate that breaks the
budget is therefore never chosen, however fast it is.

Near ties: the fastest promoted candidate is chosen unless another promoted one is
indistinguishable from it (head to head, :mod:`tfopt.optimizer.gate.near_ties`) and keeps more of
the model's numeric precision: float32 before reduced floats (fp16, bf16) before int8. Then the
most precise of the tied ones is chosen (the fastest of those, if several). A 1% difference the
benchmark cannot resolve is no reason to serve fewer bits: on the StringLookup classifier the
gate measured LiteRT fp16 at 23.32x and fp32 at 23.27x, intervals overlapping, and chose fp16,
which head to head is 3-5% slower than fp32 at batch 1 (its ``DEQUANTIZE`` of the embedding
table's output, ``benchmarks/families.py``).

:meth:`Selection.rows` is one row per candidate (built and skipped) with its format, runtime,
latency ratio to the baseline, accuracy, size and verdict: what ``candidates.json`` holds and
the report's candidate table and Pareto chart show.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
from tfopt.optimizer.benchmark.result import UNOPTIMIZED_INPUT, BenchmarkResult
from tfopt.optimizer.candidates.candidate import Candidate, Skipped
from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.gate.near_ties import precision_rank
from tfopt.optimizer.gate.verdict import GateConfig, GateDecision, evaluate_gate
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy


@dataclass(frozen=True)
class Selection:
    result: BenchmarkResult
    decision: GateDecision
    candidates: tuple[Candidate, ...]
    skipped: tuple[Skipped, ...]

    @property
    def chosen(self) -> Candidate | None:
        return next((c for c in self.candidates if c.label == self.decision.chosen), None)

    def rows(self) -> list[dict]:
        return candidate_rows(self.result, self.decision, self.candidates, self.skipped)

    def to_dict(self, kept: dict[str, str] | None = None) -> dict:
        """``kept``: label -> where that candidate now is; the others' paths become null
        (when the candidates were built in a scratch directory, only the chosen one stays)."""
        chosen = self.chosen
        rows = self.rows()
        if kept is not None:
            for row in rows:
                if "path" in row:
                    row["path"] = kept.get(row["label"])
        chosen_dict = chosen.to_dict() if chosen else None
        if chosen_dict is not None and kept is not None:
            chosen_dict["path"] = kept.get(chosen.label)
        return {"baseline": self.result.baseline.label,
                "baseline_path": self.result.baseline.path,
                "latency_batch_size": self.decision.latency_batch_size,
                "chosen": chosen_dict, "candidates": rows}

    def write_json(self, path: str | os.PathLike, kept: dict[str, str] | None = None) -> Path:
        from tfopt.optimizer.files.atomic import atomic_file

        path = Path(path)
        with atomic_file(path, overwrite=True) as staging:
            staging.write_text(json.dumps(self.to_dict(kept), indent=2) + "\n")
        return path


def _accuracy(measurement) -> tuple[float | None, str | None]:
    """(value, what it is): held-out metric when there are labels, else top-1 agreement."""
    if measurement.quality is not None:
        return measurement.quality.value, measurement.quality.metric
    if measurement.fidelity is not None and measurement.fidelity.top1_agreement is not None:
        return measurement.fidelity.top1_agreement, "top1_agreement_with_input"
    return None, None


def candidate_rows(result: BenchmarkResult, decision: GateDecision,
                   candidates: Sequence[Candidate], skipped: Sequence[Skipped] = ()
                   ) -> list[dict]:
    """One row per candidate, measured or skipped, fastest first; skipped ones last.
    ``candidates`` say what each measured model is (every one of them is among them)."""
    batch = decision.latency_batch_size
    # accuracy drops are the input's minus the candidate's, whatever the latency baseline is
    base_accuracy, _ = _accuracy(result.accuracy_reference)
    tagged = {c.label: c for c in candidates}
    rows = []
    for measurement in result.candidates:
        tag = tagged[measurement.label]
        verdict = decision.verdict(measurement.label)
        interval = decision.intervals.get(measurement.label, {}).get(batch)
        accuracy, accuracy_kind = _accuracy(measurement)
        baseline_accuracy = (1.0 if accuracy_kind == "top1_agreement_with_input"
                             else base_accuracy)
        # the drop as the gate measured it (metric direction and the agreement bound included)
        drop_check = next((c for c in verdict.checks if c.name == "accuracy_drop_abs"), None)
        rows.append({
            "label": measurement.label,
            "target": tag.target,
            "variant": tag.variant,
            "format": tag.format,
            "runtime": tag.runtime,
            "calibration": tag.calibration,
            "float_layers": list(tag.float_layers),  # a mixed int8's layers kept in float
            "path": measurement.path,
            "size_bytes": measurement.size_bytes,
            "p50_seconds": measurement.latency[batch].p50 if batch in measurement.latency
            else None,
            "ratio_to_baseline": interval.ratio if interval else None,
            "ratio_interval": [interval.low, interval.high] if interval else None,
            "speedup": verdict.speedup,
            "accuracy": accuracy,
            "accuracy_kind": accuracy_kind,
            "baseline_accuracy": baseline_accuracy,
            "max_rel_diff": (measurement.fidelity.max_rel_diff
                             if measurement.fidelity is not None else None),
            "accuracy_drop": drop_check.measured if drop_check is not None else None,
            "verdict": "chosen" if decision.chosen == measurement.label
            else ("passed" if verdict.promote else "rejected"),
            "reasons": [c.reason for c in verdict.failed],
            "how_to_load": tag.how_to_load,
        })
    rows.sort(key=lambda r: (r["ratio_to_baseline"] is None, r["ratio_to_baseline"] or 0.0))
    rows += [{"label": s.label, "verdict": "skipped", "reasons": [s.reason]} for s in skipped]
    return rows


def select_candidate(
    baseline: str | os.PathLike,
    candidates: Sequence[Candidate],
    gate_config: GateConfig,
    benchmark_config: BenchmarkConfig | None = None,
    *,
    skipped: Sequence[Skipped] = (),
    eval_data=None,
    baseline_role: str = UNOPTIMIZED_INPUT,
    runtime=None,
    progress: Callable[[str], None] | None = None,
    budget=None,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> Selection:
    """Benchmark ``candidates`` against ``baseline`` and let the gate choose. With a memory
    ``budget`` (:class:`~tfopt.optimizer.system.memory_budget.MemoryBudget`), in groups that fit it when
    they do not all fit together (:mod:`tfopt.optimizer.benchmark.memory_groups`). Every SavedModel is
    read under ``policy`` (:mod:`tfopt.optimizer.model.op_scan`)."""
    if not candidates:
        raise InvalidInputsError("no candidate to choose from"
                                 + (f" ({len(skipped)} skipped: {skipped[0].reason})"
                                    if skipped else ""))
    # their precision, so that timing goes on while the near-tie choice is unresolved
    subjects = [Subject.candidate(c.path, label=c.label,
                                  precision_rank=precision_rank(c.precision))
                for c in candidates]
    base = Subject.baseline(baseline, role=baseline_role, label="input")
    if budget is None:
        result = run_benchmark(base, subjects, benchmark_config or BenchmarkConfig(),
                               runtime=runtime, eval_data=eval_data, progress=progress,
                               policy=policy)
    else:
        from tfopt.optimizer.benchmark.memory_groups import run_benchmark_within

        result = run_benchmark_within(
            budget, base, subjects, benchmark_config or BenchmarkConfig(),
            variants={c.label: c.variant for c in candidates}, runtime=runtime,
            eval_data=eval_data, progress=progress, policy=policy)
    decision = evaluate_gate(result, gate_config,
                             precisions={c.label: c.precision for c in candidates})
    measured = {c.label for c in result.candidates}
    # left out of the benchmark: they fit beside the baseline in no group within its limit
    # (the memory budget, or a big model's working set: the benchmark's notes say which)
    skipped = [*skipped, *(Skipped(c.label, "left out of the benchmark: it fits beside the "
                                            "baseline in no group within the benchmark's "
                                            "memory limit (see its notes)")
                           for c in candidates if c.label not in measured)]
    return Selection(result, decision, tuple(c for c in candidates if c.label in measured),
                     tuple(skipped))
