"""The report's head: what was optimized (a title block), the verdict in one line with the
chosen candidate's speedup, and what to do next (load it, serve it, roll back).

A reviewer reads the top of the page first, so everything needed to accept or refuse the change
is there; the tables below are the evidence. Every speedup in the report is written by
:func:`speedup_text` from the gate's interval (:func:`gate_interval`), so one quantity has one
figure everywhere: the gate's point estimate and interval, not a ratio of two p50s.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfopt.optimizer.benchmark.result import CHAMPION, BenchmarkResult
from tfopt.optimizer.benchmark.stats import RatioInterval

CHAMPION_LABEL_PREFIX = "champion-v"  # tfopt.components.pipeline.artifacts.ChampionModel.label


@dataclass(frozen=True)
class ReportTitle:
    """What the report is about, beyond the benchmark: the registry name and alias a promotion
    moves, where the model came from, when, and the chosen model's one-line load snippet (with
    its tuned thread settings applied, when tuning ran)."""

    registered_model: str
    alias: str
    source: str
    created: str  # UTC, ISO 8601
    load: str = ""


def gate_interval(result: BenchmarkResult, decision, label: str, batch: int
                  ) -> RatioInterval | None:
    """The interval the gate judged ``label`` by at ``batch`` (recomputed at the gate's
    confidence), else the benchmark's own."""
    if decision is not None:
        interval = decision.intervals.get(label, {}).get(batch)
        if interval is not None:
            return interval
    return result.ratios.get(label, {}).get(batch)


def speedup_text(interval: RatioInterval) -> str:
    """``1.42x [1.31, 1.55]``: the one way a speedup and its interval are written."""
    high = f"{1 / interval.low:.2f}" if interval.low > 0 else "inf"
    return f"{interval.speedup:.2f}x [{1 / interval.high:.2f}, {high}]"


def previous_version(result: BenchmarkResult) -> str | None:
    """The registry version the run was judged against (the champion), when it was one."""
    base = result.baseline
    if base.role == CHAMPION and base.label.startswith(CHAMPION_LABEL_PREFIX):
        return base.label[len(CHAMPION_LABEL_PREFIX):]
    return None


def heading_lines(result: BenchmarkResult, decision, title: ReportTitle | None) -> list[str]:
    lines = [f"# {title.registered_model}: optimization report" if title else
             "# Benchmark report", ""]
    if title is not None:
        source = result.accuracy_reference
        base = result.baseline
        replaces = (f"{base.label} ({base.format}, {base.runtime})" if base.role == CHAMPION
                    else "none (no champion: compared with the input)")
        lines += [f"- **Model:** {title.registered_model} (alias `{title.alias}`)",
                  f"- **Source:** `{title.source}`",
                  f"- **Digest:** `{source.digest}`",
                  f"- **Replaces:** {replaces}",
                  f"- **Date:** {title.created}", ""]
    lines += verdict_lines(result, decision)
    if title is not None and decision is not None and decision.promote:
        lines += next_steps_lines(result, title)
    return lines


def verdict_lines(result: BenchmarkResult, decision) -> list[str]:
    if decision is None:
        return []
    batch = decision.latency_batch_size
    compared = [f"Compared: {decision.comparisons}.", ""] if decision.comparisons else []
    if not decision.promote:
        return [(f"**Gate: REJECT: no candidate passes; keep the baseline "
                 f"({result.baseline.label}).**"), "", *compared]
    interval = gate_interval(result, decision, decision.chosen, batch)
    conf = f"{decision.config.confidence * 100:g}% CI"
    speed = (f" {speedup_text(interval)} ({conf}) faster than {result.baseline.label} "
             f"at batch {batch} (p50)." if interval is not None else "")
    return [f"**Gate: PROMOTE {decision.chosen}.**{speed}", "", *compared]


def next_steps_lines(result: BenchmarkResult, title: ReportTitle) -> list[str]:
    """Load it, serve it, roll back: each a line to paste."""
    uri = f"models:/{title.registered_model}@{title.alias}"
    previous = previous_version(result)
    rollback = (f"MlflowClient().set_registered_model_alias({title.registered_model!r}, "
                f"{title.alias!r}, {previous!r})" if previous else
                f"MlflowClient().delete_registered_model_alias({title.registered_model!r}, "
                f"{title.alias!r})  # no version held the alias before")
    lines = ["## What to do next", ""]
    if title.load:
        lines += [("- **Load** (after `mlflow.artifacts.download_artifacts(...)` of "
                  f"`{uri}` to `path`):"), "", "  ```python",
                  *[f"  {line}" for line in title.load.strip().splitlines()], "  ```"]
    lines += [f"- **Serve:** `mlflow models serve -m {uri}`",
              f"- **Roll back:** `{rollback}` (mlflow has no CLI command for aliases)", ""]
    return lines
