"""gate: the verdict on every candidate, and the before/after report a reviewer reads.

Three named parts, in order: the verdict (:func:`tfopt.optimizer.gate.verdict.evaluate_gate`),
:func:`tune` of the chosen model's runtime settings, and the :func:`report` on the fastest
candidate (the chosen one, else the fastest rejected). Tuning goes before the report so that
the report's step costs have its row (``gate.tune``), and so that its probe processes start
beside a step process that has not yet loaded models for the report's op profiles. Its record
names what publish logs (``publishable``), carries the evaluation it judged, so publish reads
only this record, and the tuning's cost (``part_costs``), which the step runner adds to the
steps' costs (:func:`tfopt.components.pipeline.step_runner.run_step`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import UTC
from pathlib import Path
from typing import Any

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import EvaluationOutput, GateOutput
from tfopt.components.pipeline.workspace import Workspace

log = logging.getLogger(__name__)


def from_inputs(call) -> GateOutput:
    """The table's entry (tfopt.components.pipeline.step_table); the costs of the steps before go in the
    report."""
    evaluation = call.output("evaluate")
    verdict = gate(call.config, evaluation, call.workspace, dict(call.step_costs))
    # A record an older tfopt left in the workspace does not carry the evaluation it judged.
    return verdict if verdict.evaluation else dataclasses.replace(
        verdict, evaluation=evaluation.to_dict())


def gate(config: PipelineConfig, evaluation: EvaluationOutput, ws: Workspace,
         step_costs: dict | None = None) -> GateOutput:
    """``step_costs`` (step -> wall time and peak memory) of the steps before go in the report."""
    def run(step_dir: Path) -> GateOutput:
        from tfopt.components.pipeline.step_table import part_costs as named_part_costs
        from tfopt.components.publishing.publication import publishable_labels
        from tfopt.optimizer.benchmark.result import load_result
        from tfopt.optimizer.candidates.candidate import Candidate, Skipped
        from tfopt.optimizer.gate.selection import CANDIDATES_FILE, judge
        from tfopt.optimizer.report.precision_search import precision_outcomes
        from tfopt.optimizer.runtime import read_signature

        result = load_result(evaluation.result_path)
        # what each candidate is, from its record: the gate does not guess from labels; the
        # gate stage is tfopt optimize --targets' too (tfopt.optimizer.gate.selection.judge)
        selection = judge(result, [Candidate.from_dict(tag) for tag in evaluation.candidate_tags],
                          config.gate, [Skipped(s["label"], s["reason"])
                                        for c in evaluation.candidates
                                        for s in c.get("skipped", [])])
        decision = selection.decision
        verdict_path = step_dir / "verdict.json"
        verdict_path.write_text(json.dumps(decision.to_dict(), indent=2) + "\n")
        selection.write_json(step_dir / CANDIDATES_FILE)
        publishable = publishable_labels(decision.to_dict())
        # Every model measured keeps the source's signature; the baseline's is read here.
        signature = read_signature(result.baseline.path, config.signature,
                                   format=result.baseline.format,
                                   policy=config.security.scan_policy())
        chosen_path = result.candidate(decision.chosen).path if decision.chosen else None
        tuned, tune_cost = tune(config, chosen_path, step_dir) if chosen_path else (None, None)
        parts = {"tune": tune_cost.to_dict()} if tune_cost else {}
        # The report explains the best candidate even when it is rejected, for the reviewer.
        report_dir = report(config, selection, publishable[0], signature, step_dir,
                            {**(step_costs or {}), **named_part_costs("gate", parts)}, tuned,
                            precision_outcomes(evaluation.candidates))
        summary = (f"promote {decision.chosen}" if decision.promote
                   else "reject: " + "; ".join(
                       f"{v.candidate}: {v.summary()}" for v in decision.verdicts))
        log.info("gate: %s", summary)
        return GateOutput(promote=decision.promote, chosen=decision.chosen,
                          chosen_path=chosen_path, summary=summary,
                          verdict_path=str(verdict_path), report_dir=str(report_dir),
                          runtime_settings_path=str(tuned) if tuned else None,
                          signature=signature.to_dict(), publishable=publishable,
                          evaluation=evaluation.to_dict(), part_costs=parts)

    return ws.reuse_or_run(Workspace.keyed("gate", evaluation.result_path), GateOutput, run)


def report(config: PipelineConfig, selection, shown: str, signature, step_dir: Path,
           step_costs: dict | None, tuned: Path | None = None,
           precision: dict | None = None) -> Path:
    """The before/after report of the gate's ``selection``
    (:class:`~tfopt.optimizer.gate.selection.Selection`) under ``step_dir/report``, with the op
    profile of the baseline and ``shown``, its title block and next steps (the chosen model's
    load line with the ``tuned`` runtime settings) and the ``precision`` searches of the mixed
    int8 candidates; returns its directory."""
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.report.profile import profile_baseline_and_candidate
    from tfopt.optimizer.report.write import write_report

    result, decision = selection.result, selection.decision
    profiles = []
    try:
        feeds = make_inputs(signature, batch_size=min(result.settings.batch_sizes))
        profiles = profile_baseline_and_candidate(result, shown, feeds,
                                                  policy=config.security.scan_policy())
    except Exception as exc:  # noqa: BLE001 - the profile is an aid, never a blocker
        log.warning("gate: op profile skipped: %s", exc)
    rows = selection.rows()
    written = write_report(result, step_dir / "report", decision, profiles,
                           candidate_rows=rows, step_costs=step_costs,
                           title=report_title(config, rows, decision, tuned), precision=precision)
    return written.directory


def report_title(config: PipelineConfig, rows: list[dict], decision, tuned: Path | None):
    """The report's title block: the registry name and alias, the source, now, and the chosen
    model's load line with its tuned thread settings (when tuning ran)."""
    from datetime import datetime

    from tfopt.optimizer.candidates.build import savedmodel_load_instructions
    from tfopt.optimizer.report.heading import ReportTitle
    from tfopt.optimizer.runtime_tuning import TunedRuntimeSettings

    chosen = next((r for r in rows if r["label"] == decision.chosen), None)
    load = ""
    if chosen is not None:
        load = chosen.get("how_to_load") or savedmodel_load_instructions(config.signature)
        if tuned is not None:
            load = TunedRuntimeSettings.from_json(tuned).load_snippet(load)
    return ReportTitle(registered_model=config.mlflow.registered_model,
                       alias=config.mlflow.alias, source=config.source,
                       created=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                       load=load)


def tune(config: PipelineConfig, model_path: str, step_dir: Path) -> tuple[Path | None, Any]:
    """The chosen model's thread settings and batch size, as ``runtime_settings.json``, and
    what tuning cost (a :class:`~tfopt.optimizer.system.process_tree.Cost`: wall time and the peak
    of the process tree, its probes included; None when tuning is off).

    Tuning informs how to serve the model; it never changes the verdict, so a failure is
    logged and the model is published without it."""
    from tfopt.optimizer.system.process_tree import TreeMeter

    if not config.tuning.enabled:
        return None, None
    with TreeMeter() as meter:
        written = _tune(config, model_path, step_dir)
    return written, meter.cost


def _tune(config: PipelineConfig, model_path: str, step_dir: Path) -> Path | None:
    from tfopt.optimizer.errors import TfoptError
    from tfopt.optimizer.runtime_tuning import RUNTIME_SETTINGS_FILE, tune_runtime
    from tfopt.optimizer.system.memory_budget import memory_budget

    section = config.tuning
    try:
        settings = tune_runtime(
            model_path, throughput_target=section.throughput_target,
            latency_slo_ms=section.latency_slo_ms, signature=config.signature,
            rounds=section.rounds, seconds_per_probe=section.seconds_per_probe,
            time_budget_seconds=section.time_budget_seconds,
            progress=lambda message: log.info("tuning: %s", message),
            policy=config.security.scan_policy(),
            budget=memory_budget(config.resources.memory_gb))
    except TfoptError as exc:
        log.warning("gate: runtime tuning skipped: %s", exc)
        return None
    return settings.to_json(step_dir / RUNTIME_SETTINGS_FILE, overwrite=True)
