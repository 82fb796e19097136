"""PNG charts of a benchmark result (matplotlib, the ``report`` extra; Agg backend, no display).

- :func:`latency_distribution_chart`: per model, the distribution of per-call latency at one
  batch size (horizontal box plot on a log axis, outliers beyond the p1-p99 whiskers drawn
  faintly), so a reader sees spread and tails, not just the median; the model names are rows,
  so long labels never overlap however many candidates there are.
- :func:`speedup_chart`: per candidate and batch size, the p50 speedup over the baseline
  (``1 / ratio``) with the confidence interval as error bars, and the gate's required speedup
  as a dashed line when given.
- :func:`pareto_chart`: every candidate's latency against its accuracy, with the Pareto front
  and the accuracy budget: which candidates trade how much accuracy for how much speed.
"""

from __future__ import annotations

import os
from pathlib import Path

from tfopt.optimizer.benchmark.result import BenchmarkResult
from tfopt.optimizer.benchmark.stats import RatioInterval


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def latency_distribution_chart(result: BenchmarkResult, path: str | os.PathLike,
                               batch_size: int | None = None) -> Path:
    plt = _pyplot()
    batch = batch_size or min(result.settings.batch_sizes)
    models = [m for m in result.models if batch in m.samples]
    data = [[s * 1e3 for s in m.samples[batch]] for m in models]
    labels = [f"{m.label} ({m.role})" for m in models]
    # one row per model, the first (the baseline) on top
    fig, ax = plt.subplots(figsize=(7.5, max(2.6, 0.45 * len(models) + 1.6)))
    ax.boxplot(data[::-1], showfliers=True, whis=(1, 99), vert=False,
               flierprops={"markersize": 2, "alpha": 0.3})
    ax.set_yticks(range(1, len(models) + 1), labels[::-1], fontsize=8)
    ax.set_xscale("log")  # the tail (preempted calls) spans decades; a linear axis hides the box
    ax.set_xlabel("latency per call (ms, log scale)")
    from matplotlib.ticker import FormatStrFormatter

    ax.xaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    ax.xaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_title(f"Latency distribution at batch {batch}\n"
                 f"{len(data[0]) if data else 0} calls in interleaved rounds of "
                 f"{result.settings.block_size}; whiskers p1-p99",
                 fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path


def speedup_chart(result: BenchmarkResult, path: str | os.PathLike,
                  intervals: dict[str, dict[int, RatioInterval]] | None = None,
                  min_speedup: float | None = None) -> Path:
    plt = _pyplot()
    intervals = intervals or result.ratios
    batches = sorted(result.settings.batch_sizes)
    candidates = [c.label for c in result.candidates]
    width = 0.8 / max(1, len(batches))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(candidates) + 2), 4.2))
    confidence = None
    for j, batch in enumerate(batches):
        xs, heights, below, above = [], [], [], []
        for i, label in enumerate(candidates):
            interval = intervals.get(label, {}).get(batch)
            if interval is None:
                continue
            confidence = interval.confidence
            speedup = interval.speedup
            xs.append(i + (j - (len(batches) - 1) / 2) * width)
            heights.append(speedup)
            below.append(max(0.0, speedup - 1 / interval.high))
            above.append(max(0.0, 1 / interval.low - speedup))
        ax.bar(xs, heights, width=width * 0.9, yerr=[below, above], capsize=4,
               label=f"batch {batch}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    if min_speedup:
        ax.axhline(min_speedup, color="tab:red", linestyle="--", linewidth=1,
                   label=f"required {min_speedup:g}x")
    # slanted: candidate labels (onnx_dynamic_int8, ...) are wider than their bars
    ax.set_xticks(range(len(candidates)), candidates, fontsize=8, rotation=30,
                  ha="right", rotation_mode="anchor")
    ax.set_ylabel(f"p50 speedup over {result.baseline.label} (x)")
    ci = f"{confidence * 100:g}% CI" if confidence else "CI"
    ax.set_title(f"p50 speedup over the baseline\nerror bars: {ci}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path


_POINTS = {"chosen": {"marker": "*", "s": 220, "color": "tab:green"},
           "passed": {"s": 50, "color": "tab:blue"},
           "rejected": {"s": 50, "facecolors": "none", "edgecolors": "tab:red"}}
_POINT_NAMES = {"chosen": "promoted", "passed": "passed, not chosen",
                "rejected": "rejected by the gate"}


def pareto_chart(rows, path: str | os.PathLike, baseline_p50: float | None = None,
                 baseline_accuracy: float | None = None,
                 accuracy_budget: float | None = None) -> Path:
    """Latency against accuracy, one point per measured candidate (rows of
    :func:`tfopt.optimizer.gate.selection.candidate_rows`): the promoted one starred, the others that
    passed filled, the ones the gate rejected hollow (each named in the legend), the Pareto front (no other candidate both faster and more accurate) as a
    line, the baseline and the lowest accuracy the budget allows as dashed lines."""
    plt = _pyplot()
    measured = [r for r in rows if r.get("p50_seconds") and r.get("accuracy") is not None]
    fig, ax = plt.subplots(figsize=(8.4, 4.6))
    kinds = [r["verdict"] if r["verdict"] in _POINTS else "rejected" for r in measured]
    for kind, style in _POINTS.items():  # each kind once in the legend, promoted first
        if kind in kinds:
            ax.scatter([], [], label=_POINT_NAMES[kind], **style)
    for n, row in enumerate(sorted(measured, key=lambda r: r["p50_seconds"])):
        x, y = row["p50_seconds"] * 1e3, row["accuracy"]
        kind = row["verdict"] if row["verdict"] in _POINTS else "rejected"
        ax.scatter([x], [y], zorder=3, **_POINTS[kind])
        # staggered: candidates of equal accuracy and close latency would print over each other
        ax.annotate(row["label"], (x, y), textcoords="offset points",
                    xytext=(5, 4 + 9 * (n % 3)), fontsize=7)
    front, best = [], -float("inf")
    for row in sorted(measured, key=lambda r: (r["p50_seconds"], -r["accuracy"])):
        if row["accuracy"] > best:
            front.append(row)
            best = row["accuracy"]
    if len(front) > 1:
        ax.step([r["p50_seconds"] * 1e3 for r in front], [r["accuracy"] for r in front],
                where="post", color="gray", linewidth=1, alpha=0.7, label="Pareto front")
    if baseline_p50:
        ax.axvline(baseline_p50 * 1e3, color="black", linestyle=":", linewidth=1,
                   label="baseline p50")
    if baseline_accuracy is not None and accuracy_budget is not None:
        ax.axhline(baseline_accuracy - accuracy_budget, color="tab:red", linestyle="--",
                   linewidth=1, label="accuracy budget")
    kind = next((r["accuracy_kind"] for r in measured), "accuracy")
    ax.set_xscale("log")
    from matplotlib.ticker import FormatStrFormatter

    ax.xaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    ax.xaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
    ax.tick_params(axis="x", which="minor", labelsize=7)
    # room for the staggered names above and right of the points, inside the axes
    ax.margins(x=0.2, y=0.18)
    ax.set_xlabel("p50 latency (ms, log scale)")
    ax.set_ylabel(kind.replace("_", " "))
    ax.set_title("Candidates: latency vs accuracy", fontsize=10)
    handles, names = ax.get_legend_handles_labels()
    if handles:  # beside the plot, where it hides no point
        ax.legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path
