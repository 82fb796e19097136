"""The report for people: a Markdown page per benchmark (and gate decision).

It opens with the before/after table per candidate, one row per thing a reviewer weighs
(inference time, throughput, accuracy, graph size, load time, memory) and a comment column that
says it in words ("1.42x faster"), in the style of the Intel inference-optimization tutorials.
Then the gate's verdict with every check, the latency detail at each batch size, the charts, the
per-op time profile of the baseline and the chosen candidate, and the environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tfopt.optimizer.benchmark.result import BenchmarkResult, ModelMeasurement
from tfopt.optimizer.benchmark.stats import RatioInterval, promotion_bound, twin_discrepancy
from tfopt.optimizer.report.heading import ReportTitle, gate_interval, heading_lines, speedup_text
from tfopt.optimizer.report.precision_search import precision_search_lines
from tfopt.optimizer.report.profile import OpProfile
from tfopt.optimizer.report.table import markdown_table


def human_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def ratio_comment(before: float | None, after: float | None, better: str, worse: str,
                  smaller_is_better: bool = True) -> str:
    """"1.42x faster" / "1.10x slower" / "same"; ``better``/``worse`` name the direction."""
    if not before or not after:
        return ""
    ratio = before / after if smaller_is_better else after / before
    if abs(ratio - 1) < 0.005:
        return "same"
    return f"{ratio:.2f}x {better}" if ratio > 1 else f"{1 / ratio:.2f}x {worse}"


def _quality_row(base: ModelMeasurement, cand: ModelMeasurement) -> list[object]:
    if base.quality and cand.quality:
        b, c = base.quality, cand.quality
        delta = c.value - b.value
        if b.metric == "top1":
            comment = "same" if delta == 0 else f"{delta * 100:+.2f} points"
        else:
            improved = (delta > 0) == b.higher_is_better
            comment = "same" if delta == 0 else f"{delta:+.4g} ({'better' if improved else 'worse'})"
        return [f"accuracy ({b.metric}, {b.examples} examples)", f"{b.value:.4f}",
                f"{c.value:.4f}", comment]
    fid = cand.fidelity
    if fid and fid.top1_agreement is not None:
        return ["accuracy (no labels: top-1 agreement with the input)", "reference",
                f"{fid.top1_agreement:.4f}",
                f"max abs error {fid.max_abs_diff:.3g}, max rel error {fid.max_rel_diff:.3g}"]
    if fid:
        return ["accuracy (no labels: output error)", "reference",
                f"max rel {fid.max_rel_diff:.3g}", f"max abs error {fid.max_abs_diff:.3g}"]
    return ["accuracy", "n/a", "n/a", "not measured"]


def before_after_table(result: BenchmarkResult, candidate: ModelMeasurement,
                       decision=None) -> list[str]:
    base = result.baseline
    batches = sorted(result.settings.batch_sizes)
    first, last = batches[0], batches[-1]
    ratio = gate_interval(result, decision, candidate.label, first)
    # the gate's paired estimate, as everywhere in the report, not the ratio of the two p50s
    if ratio is not None:
        time_comment = (f"{speedup_text(ratio)} faster ({ratio.confidence * 100:g}% CI)"
                        if ratio.speedup >= 1 else
                        f"{1 / ratio.speedup:.2f}x slower (speedup {speedup_text(ratio)}, "
                        f"{ratio.confidence * 100:g}% CI)")
    else:
        time_comment = ratio_comment(base.latency[first].p50, candidate.latency[first].p50,
                                     "faster", "slower")
    rows = [
        [f"inference time (p50, batch {first})", ms(base.latency[first].p50),
         ms(candidate.latency[first].p50), time_comment],
        [f"throughput (batch {last})", f"{base.latency[last].throughput:.1f} items/s",
         f"{candidate.latency[last].throughput:.1f} items/s",
         ratio_comment(base.latency[last].throughput, candidate.latency[last].throughput,
                       "higher", "lower", smaller_is_better=False)],
        _quality_row(base, candidate),
        ["graph size (on disk)", human_bytes(base.size_bytes), human_bytes(candidate.size_bytes),
         ratio_comment(base.size_bytes, candidate.size_bytes, "smaller", "larger")],
        ["load time", ms(base.load_seconds), ms(candidate.load_seconds),
         ratio_comment(base.load_seconds, candidate.load_seconds, "faster", "slower")],
        ["peak RSS growth on load", human_bytes(base.peak_rss_growth_bytes),
         human_bytes(candidate.peak_rss_growth_bytes),
         ratio_comment(base.peak_rss_growth_bytes, candidate.peak_rss_growth_bytes,
                       "less", "more")],
    ]
    return markdown_table(["", f"baseline: {base.label} ({base.role})",
                   f"candidate: {candidate.label}", "comment"], rows)


def _latency_detail(result: BenchmarkResult, decision=None) -> list[str]:
    """Every timed model per batch size, the baseline's twin (a second load of it, timed like a
    candidate) after the baseline: its speedup is what two loads of one model measured apart."""
    twin_ratios = decision.twin if decision is not None else {}
    rows = []
    timed = result.models[:1] + ((result.twin,) if result.twin is not None else ()) \
        + result.models[1:]
    for batch in sorted(result.settings.batch_sizes):
        for m in timed:
            if batch not in m.latency:
                continue
            s = m.latency[batch]
            ratio = (twin_ratios.get(batch) if m is result.twin
                     else gate_interval(result, decision, m.label, batch))
            vs = speedup_text(ratio) if ratio else "baseline"
            rows.append([batch, m.label, s.runs, ms(s.p50), ms(s.p90), ms(s.p99), ms(s.mean),
                         f"{s.throughput:.1f}", vs])
    conf = f"{result.settings.confidence * 100:g}%"
    return markdown_table(["batch", "model", "runs", "p50", "p90", "p99", "mean", "items/s",
                   f"speedup [{conf} CI]"], rows)


def _verdict_word(decision, verdict) -> str:
    if decision.chosen == verdict.candidate:
        return "PROMOTED"
    return "passed, not chosen" if verdict.promote else "REJECT"


def _twin_lines(decision) -> list[str]:
    """What the baseline's twin measured, and the promotion bound it set at each batch size."""
    lines = []
    for batch, ratio in sorted(decision.twin.items()):
        lines.append(f"Baseline twin, batch {batch}: a second load of the baseline measured "
                     f"{ratio.ratio:.3f} of its time; a candidate's interval must lie below "
                     f"{promotion_bound(decision.config.min_speedup, ratio):.3f} "
                     f"(1 / ({decision.config.min_speedup:g} x {twin_discrepancy(ratio):.3f})).")
    return lines + [""]


def _profile_section(profiles: Sequence[OpProfile], top: int) -> list[str]:
    lines = ["## Where the time goes (per-op profile)", ""]
    for profile in profiles:
        lines.append(f"**{profile.label}**: {profile.total_micros_per_run:.0f} µs of op time "
                     f"per run, {profile.runs} traced runs ({profile.graph_source})")
        lines.append("")
        rows = [[o.op, f"{o.micros_per_run:.1f}", f"{o.share:.1%}", o.nodes]
                for o in profile.top(top)]
        lines += markdown_table(["op", "µs/run", "share", "nodes"], rows)
        lines.append("")
    lines.append("Times from TensorFlow step stats (FULL_TRACE), grouped by the kernel that ran; "
                 "tracing adds overhead, so compare shares rather than absolute times.")
    return lines


def accuracy_table(result: BenchmarkResult) -> list[str]:
    """Every model's accuracy, the unoptimized input first: the gate's budgets are drops from
    the input's, whichever model the latency baseline is."""
    reference = result.accuracy_reference
    rows = []
    for m in result.measured:
        drop = ""
        if m.quality is not None and reference.quality is not None and m is not reference:
            delta = m.quality.value - reference.quality.value
            drop = f"{-delta if m.quality.higher_is_better else delta:+.4f}"
        agreement = ("-" if m.fidelity is None or m.fidelity.top1_agreement is None
                     else f"{m.fidelity.top1_agreement:.4f}")
        rows.append([m.label, m.role, m.runtime,
                     "-" if m.quality is None else f"{m.quality.value:.4f}", drop or "-",
                     agreement])
    metric = next((m.quality.metric for m in result.measured if m.quality is not None),
                  "accuracy")
    return markdown_table(["model", "role", "runtime", metric, f"drop vs {reference.label}",
                   f"top-1 agreement with {reference.label}"], rows)


VERDICT_WORDS = {"chosen": "PROMOTED", "passed": "passed, not chosen", "rejected": "rejected"}


def candidates_table(rows: Sequence[dict]) -> list[str]:
    """Every candidate, fastest first: format, runtime, what an int8 one was calibrated on
    (``synthetic``: inputs generated from the signature), the layers a mixed int8 one keeps in
    float (when there is one), speedup, accuracy, size, verdict. Only the chosen row says
    PROMOTED: the others that passed were not promoted."""
    mixed = any(r.get("float_layers") for r in rows)
    table_rows = []
    for r in rows:
        kept = [", ".join(r.get("float_layers") or []) or "-"] if mixed else []
        if r["verdict"] == "skipped":
            table_rows.append([r["label"], "-", "-", "-", *(["-"] if mixed else []), "-", "-",
                               "-", "skipped", "; ".join(r["reasons"])])
            continue
        interval = r.get("ratio_interval")
        speedup = (speedup_text(RatioInterval(r["ratio_to_baseline"], interval[0], interval[1],
                                              0, 0, 0, 0))
                   if r.get("ratio_to_baseline") and interval else "-")
        accuracy = "-" if r.get("accuracy") is None else f"{r['accuracy']:.4f}"
        table_rows.append([r["label"], r["format"], r["runtime"], r.get("calibration") or "-",
                           *kept, speedup, accuracy, human_bytes(r.get("size_bytes")),
                           VERDICT_WORDS.get(r["verdict"], r["verdict"]),
                           "; ".join(r["reasons"]) or "-"])
    return markdown_table(["candidate", "format", "runtime", "calibration",
                           *(["kept in float"] if mixed else []), "p50 speedup [CI]",
                           "accuracy", "size", "verdict", "why not"], table_rows)


def step_costs_table(step_costs: Mapping[str, Mapping], model_bytes: int) -> list[str]:
    """Each pipeline step's wall time and peak memory (its whole process tree), beside the
    model's size, which is what the memory grows with."""
    rows = []
    for step, cost in step_costs.items():
        peak = cost.get("peak_rss_bytes")
        rows.append([step, f"{cost['wall_seconds']:.1f} s", human_bytes(peak),
                     f"{peak / model_bytes:.1f}x" if peak and model_bytes else "-"])
    return ([f"The input model: {human_bytes(model_bytes)} on disk.", ""]
            + markdown_table(["step", "wall", "peak memory (process tree)", "peak / model size"], rows))


def render_markdown(result: BenchmarkResult, decision=None,
                    profiles: Sequence[OpProfile] = (), charts: Sequence[str] = (),
                    top_ops: int = 12, candidate_rows: Sequence[dict] = (),
                    step_costs: Mapping[str, Mapping] | None = None,
                    title: ReportTitle | None = None,
                    precision: Mapping[str, Mapping] | None = None) -> str:
    """The whole report. ``decision`` is an optional :class:`tfopt.optimizer.gate.verdict.GateDecision`;
    ``candidate_rows`` (:func:`tfopt.optimizer.gate.selection.candidate_rows`) adds the candidates table;
    ``step_costs`` (step -> :meth:`tfopt.optimizer.system.process_tree.Cost.to_dict`) the cost of each
    pipeline step so far; ``title`` the title block and the next steps (load, serve, roll back);
    ``precision`` each mixed int8 candidate's search, by label
    (:mod:`tfopt.optimizer.report.precision_search`).
    The verdict and the title come first: they are what a reviewer decides on."""
    lines = heading_lines(result, decision, title)
    base = result.baseline
    lines.append(f"Baseline **{base.label}** ({base.role}) against "
                 f"{', '.join(f'**{c.label}**' for c in result.candidates)}; timed interleaved "
                 f"in one process on {result.settings.inputs}.")
    lines.append("")
    if candidate_rows:
        lines += ["## Candidates", ""] + candidates_table(candidate_rows) + [""]
    if precision:
        lines += precision_search_lines(precision)
    if result.reference is not None or any(m.quality for m in result.models):
        lines += ["## Accuracy", ""] + accuracy_table(result) + [""]
    # The chosen candidate's table comes first: it is the one a reviewer is asked to accept.
    chosen = decision.chosen if decision is not None else None
    for candidate in sorted(result.candidates, key=lambda c: c.label != chosen):
        lines.append(f"## {candidate.label} vs {base.label}")
        lines.append("")
        lines += before_after_table(result, candidate, decision)
        lines.append("")
    if decision is not None:
        lines += ["## Gate verdict", ""]
        lines.append(f"Thresholds: {decision.config.model_dump()}")
        lines.append("")
        if decision.twin:
            lines += _twin_lines(decision)
        for verdict in decision.verdicts:
            lines.append(f"### {verdict.candidate}: {_verdict_word(decision, verdict)}")
            lines.append("")
            interval = gate_interval(result, decision, verdict.candidate,
                                     decision.latency_batch_size)
            lines += markdown_table(["check", "result", "measured", "threshold", "reason"],
                            [[c.name, "pass" if c.passed else "FAIL",
                              speedup_text(interval) if c.name == "latency" and interval
                              else c.measured_text, c.threshold_text, c.reason]
                             for c in verdict.checks])
            lines.append("")
    lines += ["## Latency detail", ""] + _latency_detail(result, decision) + [""]
    settings = result.settings
    block = (f"a block of {settings.block_size} consecutive timed calls of each model after one "
             f"untimed call" if settings.block_size > 1 else "one call of each model")
    lines.append(f"Each row: {settings.min_runs}+ rounds and {settings.min_seconds:g}+ s after "
                 f"{settings.warmup} warm-up calls, a round being {block}; the speedup "
                 f"interval is a paired block bootstrap over rounds (a round's figure: the "
                 f"median of its block).")
    lines.append("")
    if charts:
        lines += ["## Charts", ""]
        lines += [f"![{name}]({name})" for name in charts]
        lines.append("")
    if profiles:
        lines += _profile_section(profiles, top_ops) + [""]
    lines += ["## Models", ""]
    lines += markdown_table(["model", "role", "format", "runtime", "path", "digest", "rss growth",
                     "first call"],
                    [[m.label, m.role, m.format, m.runtime
                      + (f" ({m.num_threads} threads)" if m.num_threads else ""), m.path,
                      m.digest[:23] + "…", human_bytes(m.rss_growth_bytes),
                      ms(m.first_call_seconds)]
                     for m in result.measured])
    if step_costs:
        lines += ["", "## Cost of each step", ""]
        lines += step_costs_table(step_costs, result.accuracy_reference.size_bytes)
    lines += ["", "## Environment", "", result.environment.summary(), ""]
    for note in result.notes:
        lines.append(f"- note: {note}")
    return "\n".join(lines).rstrip() + "\n"
