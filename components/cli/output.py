"""Printing for people: aligned tables and human sizes. JSON output goes through ``json``."""

from __future__ import annotations

from collections.abc import Sequence

from tfopt.optimizer.report.markdown import human_bytes  # noqa: F401 (re-exported for commands)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def op_histogram_table(before: dict, after: dict | None = None, top: int = 20) -> str:
    if after is None:
        rows = sorted(before.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        return table(["op", "count"], rows)
    ops = sorted(set(before) | set(after), key=lambda op: (-before.get(op, 0), op))
    rows = []
    for op in ops:
        b, a = before.get(op, 0), after.get(op, 0)
        rows.append([op, b, a, f"{a - b:+d}" if a != b else ""])
    changed = [r for r in rows if r[3]]
    unchanged = [r for r in rows if not r[3]]
    shown = changed + unchanged[: max(0, top - len(changed))]
    rows_total = ["total", sum(before.values()), sum(after.values()),
                  f"{sum(after.values()) - sum(before.values()):+d}"]
    return table(["op", "before", "after", "delta"], shown + [rows_total])
