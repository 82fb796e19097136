"""Write a report directory: ``report.json``, ``report.md``, ``report.html`` and the PNG charts.

``report.json`` holds the whole benchmark result, the gate decision and the op profiles, so a
machine reading it needs nothing else; ``report.md`` links the charts by relative name, so the
directory can be moved or attached as a whole; ``report.html`` is the same page with the charts
embedded, one file that MLflow's artifact viewer renders (:mod:`tfopt.optimizer.report.html`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.benchmark.result import BenchmarkResult
from tfopt.optimizer.errors import DestinationError
from tfopt.optimizer.report.heading import ReportTitle
from tfopt.optimizer.report.html import render_html
from tfopt.optimizer.report.markdown import render_markdown
from tfopt.optimizer.report.profile import OpProfile

LATENCY_CHART = "latency_distribution.png"
SPEEDUP_CHART = "speedup.png"
PARETO_CHART = "pareto.png"


@dataclass(frozen=True)
class ReportFiles:
    directory: Path
    json: Path
    markdown: Path
    html: Path
    charts: tuple[Path, ...]


def report_payload(result: BenchmarkResult, decision=None,
                   profiles: Sequence[OpProfile] = ()) -> dict:
    return {"result": result.to_dict(),
            "gate": decision.to_dict() if decision is not None else None,
            "profiles": [p.to_dict() for p in profiles]}


def write_report(result: BenchmarkResult, directory: str | os.PathLike, decision=None,
                 profiles: Sequence[OpProfile] = (), charts: bool = True,
                 candidate_rows: Sequence[dict] = (), step_costs: dict | None = None,
                 title: ReportTitle | None = None,
                 precision: dict | None = None) -> ReportFiles:
    """``candidate_rows`` (:func:`tfopt.optimizer.gate.selection.candidate_rows`) add the candidates table
    and, with a decision, the latency-vs-accuracy Pareto chart; ``step_costs`` the wall time
    and peak memory of each pipeline step so far; ``title`` the title block and next steps
    (:class:`tfopt.optimizer.report.heading.ReportTitle`); ``precision`` each mixed int8
    candidate's precision search, by label
    (:func:`tfopt.optimizer.report.precision_search.precision_outcomes`).

    When a write fails (a full disk), the files this call added are removed again, and so is
    ``directory`` if this call made it: no half report is left for a reader to trust.
    """
    directory = Path(directory)
    created = not directory.exists()
    before = set() if created else set(directory.iterdir())
    try:
        return _write_report(result, directory, decision, profiles, charts, candidate_rows,
                             step_costs, title, precision)
    except OSError as exc:
        added = set(directory.iterdir()) - before if directory.is_dir() else set()
        for path in added:
            path.unlink(missing_ok=True)
        if created and directory.is_dir():
            directory.rmdir()
        raise DestinationError(f"cannot write the report {directory}: {exc.strerror or exc}"
                               ) from None


def _write_report(result: BenchmarkResult, directory: Path, decision, profiles: Sequence,
                  charts: bool, candidate_rows: Sequence[dict],
                  step_costs: dict | None = None, title: ReportTitle | None = None,
                  precision: dict | None = None) -> ReportFiles:
    from tfopt.optimizer.report.charts import (
        latency_distribution_chart,
        pareto_chart,
        speedup_chart,
    )

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    if charts:
        written.append(latency_distribution_chart(result, directory / LATENCY_CHART))
        written.append(speedup_chart(
            result, directory / SPEEDUP_CHART,
            intervals=decision.intervals if decision is not None else None,
            min_speedup=decision.config.min_speedup if decision is not None else None))
        if candidate_rows and decision is not None:
            batch = decision.latency_batch_size
            base = result.baseline
            measured = [r for r in candidate_rows if r.get("accuracy") is not None]
            written.append(pareto_chart(
                candidate_rows, directory / PARETO_CHART,
                baseline_p50=base.latency[batch].p50 if batch in base.latency else None,
                baseline_accuracy=measured[0]["baseline_accuracy"] if measured else None,
                accuracy_budget=decision.config.max_accuracy_drop_abs))
    json_path = directory / "report.json"
    payload = report_payload(result, decision, profiles)
    payload["candidates"] = list(candidate_rows)
    if step_costs:
        payload["step_costs"] = dict(step_costs)
    if precision:
        payload["precision_search"] = dict(precision)
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    md_path = directory / "report.md"
    markdown = render_markdown(result, decision, profiles, [p.name for p in written],
                               candidate_rows=candidate_rows, step_costs=step_costs, title=title,
                               precision=precision)
    md_path.write_text(markdown)
    html_path = directory / "report.html"
    page_title = f"{title.registered_model}: optimization report" if title else "Benchmark report"
    html_path.write_text(render_html(markdown, directory, page_title))
    return ReportFiles(directory, json_path, md_path, html_path, tuple(written))
