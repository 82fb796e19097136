"""The report's account of the precision search: for each mixed int8 candidate, the layers it
keeps in float and why the search stopped there, and every assignment it built and measured,
with the latency and error its table predicted beside those measured end to end.

``outcomes`` are :meth:`~tfopt.optimizer.search.precision.candidates.PrecisionOutcome.to_dict`
documents by candidate label, as the candidate's record carries them in its ``trace``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tfopt.optimizer.report.table import markdown_table


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f} us"


def _layers(layers: Sequence[str]) -> str:
    return ", ".join(f"`{name}`" for name in layers) if layers else "none (uniform int8)"


def precision_search_lines(outcomes: Mapping[str, Mapping]) -> list[str]:
    lines = ["## Precision search", "",
             ("Which layers each mixed int8 candidate keeps in float, and the assignments the "
              "search built and measured (its table's prediction beside the measurement; "
              "error: on the eval data's metric with labels, else fidelity to the input)."),
             ""]
    for label, outcome in outcomes.items():
        result = outcome.get("result") or {}
        lines.append(f"### {label}")
        lines.append("")
        error = outcome.get("uniform_int8_error")
        lines.append(
            f"{outcome.get('strategy', '?')} search, budget {result.get('max_error', '-')}; "
            f"uniform int8's error {'-' if error is None else f'{error:.4f}'}; "
            f"kept in float: {_layers(outcome.get('float_layers') or [])}; "
            f"{outcome.get('search_seconds', 0.0):.1f} s (its table "
            f"{outcome.get('table_seconds', 0.0):.1f} s)"
            + (f". {outcome['reason']}" if outcome.get("reason") else "") + ".")
        lines.append("")
        tried = result.get("tried") or []
        if tried:
            lines += markdown_table(
                ["float layers", "found by", "predicted p50", "measured p50",
                 "predicted error", "measured error", "inside the budget"],
                [[_layers(t["float_layers"]), t["found_by"], _us(t["predicted_seconds"]),
                  _us(t["measured_seconds"]), f"{t['predicted_error']:.4f}",
                  f"{t['measured_error']:.4f}", "yes" if t["within_budget"] else "no"]
                 for t in tried])
            lines.append("")
    return lines


def precision_outcomes(candidates: Sequence[Mapping]) -> dict[str, Mapping]:
    """label -> the search's outcome, from candidate records whose ``trace`` holds one (the
    mixed int8 candidates the optimize step built)."""
    found = {}
    for candidate in candidates:
        trace = candidate.get("trace") or []
        if candidate.get("variant") == "mixed_int8" and trace and isinstance(trace[0], Mapping) \
                and "strategy" in trace[0]:
            found[candidate["label"]] = trace[0]
    return found
