"""The report: Markdown before/after table, verdict and profile sections, valid PNG charts, and
the per-op profile from TensorFlow's step stats."""

import dataclasses
import json

import numpy as np
import pytest
from benchmark_testing import noisy_samples, synthetic_result, top1_fidelity

from tfopt.optimizer.benchmark.result import Quality
from tfopt.optimizer.candidates.candidate import Candidate
from tfopt.optimizer.gate.selection import candidate_rows
from tfopt.optimizer.gate.verdict import evaluate_gate
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.report.heading import ReportTitle, speedup_text
from tfopt.optimizer.report.markdown import ratio_comment, render_markdown
from tfopt.optimizer.report.profile import OpProfile, OpTime, aggregate_step_stats, profile_ops
from tfopt.optimizer.report.write import LATENCY_CHART, SPEEDUP_CHART, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
N = 120


@pytest.fixture
def result():
    return synthetic_result(
        {1: noisy_samples(0.002, N, 0), 32: noisy_samples(0.02, N, 1)},
        {"frozen": {"samples": {1: noisy_samples(0.0014, N, 2), 32: noisy_samples(0.016, N, 3)},
                    "size_bytes": 500,
                    "quality": Quality("top1", 0.9700, True, 450, "eval.npz"),
                    "fidelity": top1_fidelity(0.998)},
         "other": {"samples": {1: noisy_samples(0.0021, N, 4), 32: noisy_samples(0.02, N, 5)},
                   "quality": Quality("top1", 0.9711, True, 450, "eval.npz"),
                   "fidelity": top1_fidelity(0.999)}},
        baseline_quality=Quality("top1", 0.9711, True, 450, "eval.npz"))


def profile(label, conv_micros):
    ops = (OpTime("_MklNativeFusedConv2D", conv_micros, 0.8, 3), OpTime("Relu", 10.0, 0.2, 3))
    return OpProfile(label, 10, conv_micros + 10.0, ops, "frozen graph")


def assert_png(path):
    import matplotlib.image

    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_report_directory_has_markdown_json_and_valid_pngs(result, tmp_path):
    decision = evaluate_gate(result)
    profiles = [profile("baseline (input)", 400.0), profile("frozen (candidate)", 250.0)]
    files = write_report(result, tmp_path / "report", decision, profiles)
    assert [p.name for p in files.charts] == [LATENCY_CHART, SPEEDUP_CHART]
    for chart in files.charts:
        assert_png(chart)
    markdown = files.markdown.read_text()
    for chart in files.charts:
        assert f"![{chart.name}]({chart.name})" in markdown
    payload = json.loads(files.json.read_text())
    assert payload["gate"]["chosen"] == "frozen"
    assert payload["result"]["candidates"][0]["label"] == "frozen"
    assert payload["profiles"][1]["ops"][0]["op"] == "_MklNativeFusedConv2D"


def test_before_after_table_has_a_row_and_a_comment_for_each_measure(result):
    markdown = render_markdown(result, evaluate_gate(result))
    section = markdown.split("## frozen vs baseline")[1].split("##")[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in section.splitlines() if line.startswith("| ")}
    assert rows[""] == ["baseline: baseline (input)", "candidate: frozen", "comment"]
    time_row = rows["inference time (p50, batch 1)"]
    assert time_row[2].startswith("1.4") and "] faster (95% CI)" in time_row[2]
    assert rows["throughput (batch 32)"][2].endswith("x higher")
    assert rows["accuracy (top1, 450 examples)"] == ["0.9711", "0.9700", "-0.11 points"]
    assert rows["graph size (on disk)"] == ["1000 B", "500 B", "2.00x smaller"]
    assert "load time" in rows and "peak RSS growth on load" in rows


def test_markdown_lists_the_verdict_checks_and_the_profile(result):
    decision = evaluate_gate(result)
    markdown = render_markdown(result, decision,
                               [profile("baseline (input)", 400.0),
                                profile("frozen (candidate)", 250.0)])
    assert "**Gate: PROMOTE frozen.**" in markdown
    assert "### other: REJECT" in markdown
    assert "| latency | FAIL |" in markdown and "latency regressed: 1.04x slower" in markdown
    assert "## Where the time goes (per-op profile)" in markdown
    assert "| _MklNativeFusedConv2D | 400.0 | 80.0% | 3 |" in markdown
    assert "| _MklNativeFusedConv2D | 250.0 | 80.0% | 3 |" in markdown
    assert "Test CPU (avx2)" in markdown  # the environment fingerprint


@pytest.mark.parametrize("before, after, expected", [
    (2.0, 1.0, "2.00x faster"), (1.0, 1.5, "1.50x slower"), (1.0, 1.001, "same"),
    (None, 1.0, ""),
])
def test_ratio_comments(before, after, expected):
    assert ratio_comment(before, after, "faster", "slower") == expected


def test_step_stats_are_summed_by_the_kernel_that_ran():
    from tensorflow.core.framework import step_stats_pb2

    def run(conv_ns, relu_ns):
        stats = step_stats_pb2.StepStats()
        device = stats.dev_stats.add(device="/device:CPU:0")
        device.node_stats.add(node_name="conv", timeline_label="conv = _FusedConv2D(x, w)",
                              op_start_rel_nanos=100, op_end_rel_nanos=100 + conv_ns)
        device.node_stats.add(node_name="relu", op_start_rel_nanos=0, op_end_rel_nanos=relu_ns)
        return stats

    totals = aggregate_step_stats([run(3000, 1000), run(5000, 1000)], {"relu": "Relu"})
    assert totals == {"_FusedConv2D": (8000, 2), "Relu": (2000, 2)}


def test_profile_of_a_real_model_shows_its_convolutions(model_dir, tmp_path):
    stock = model_dir("keras_cnn")
    frozen_dir = tmp_path / "frozen"
    write_saved_model(freeze(stock), frozen_dir)
    feeds = make_inputs(get_signature(stock), batch_size=4)
    for path, source in ((stock, "stock SavedModel, frozen to profile"),
                         (frozen_dir, "SavedModel serving graph")):
        prof = profile_ops(path, feeds, label="cnn", runs=3)
        assert prof.graph_source == source
        assert prof.total_micros_per_run > 0
        assert sum(o.share for o in prof.ops) == pytest.approx(1.0)
        assert [o.micros_per_run for o in prof.ops] == sorted(
            (o.micros_per_run for o in prof.ops), reverse=True)
        assert any("Conv2D" in o.op for o in prof.ops), [o.op for o in prof.ops]
        assert OpProfile.from_dict(json.loads(json.dumps(prof.to_dict()))) == prof
    assert np.isfinite(prof.total_micros_per_run)


def test_profile_of_a_frozen_lstm_counts_the_ops_inside_its_loops(model_dir):
    """The runtime lowers the functional loops at load, so every trip's ops show in the step
    stats: 12 steps x 2 layers x 2 matrix products, and the Dense."""
    frozen = freeze(model_dir("keras_lstm"))
    prof = profile_ops(frozen, make_inputs(frozen.signature, batch_size=2), runs=2)
    matmuls = sum(o.nodes for o in prof.ops if "MatMul" in o.op)
    assert matmuls == 12 * 2 * 2 + 1, [(o.op, o.nodes) for o in prof.ops]


def test_the_chosen_candidate_comes_first_whatever_the_benchmark_order():
    fast = noisy_samples(0.0010, N, 7)
    result = synthetic_result(
        {1: noisy_samples(0.002, N, 0)},
        {"slow": {"samples": {1: noisy_samples(0.0021, N, 4)}, "fidelity": top1_fidelity(1.0)},
         "fast": {"samples": {1: fast}, "fidelity": top1_fidelity(1.0)}})
    decision = evaluate_gate(result)
    assert decision.chosen == "fast"
    text = render_markdown(result, decision)
    assert text.index("## fast vs") < text.index("## slow vs")


def test_the_baselines_twin_is_a_row_of_the_latency_detail_and_sets_the_stated_bound(result):
    import dataclasses

    from benchmark_testing import measurement

    from tfopt.optimizer.benchmark.result import TWIN

    base = result.baseline.samples
    twinned = dataclasses.replace(result, twin=measurement(
        "twin", TWIN, {b: [s / 1.04 for s in samples] for b, samples in base.items()}))
    markdown = render_markdown(twinned, evaluate_gate(twinned))
    detail = markdown.split("## Latency detail")[1].split("##")[0]
    twin_rows = [line for line in detail.splitlines() if "| twin |" in line]
    assert len(twin_rows) == 2  # batch 1 and 32
    assert "1.04x [" in twin_rows[0]
    bound_line = next(line for line in markdown.splitlines()
                      if line.startswith("Baseline twin, batch 1:"))
    assert "measured 0.962 of its time" in bound_line
    assert f"below {1 / (1.05 * 1.04):.3f}" in bound_line
    assert "| twin |" not in render_markdown(result, evaluate_gate(result))


def _two_passing():
    """Two candidates that both pass the gate; ``fast`` is chosen, ``quick`` is not."""
    result = synthetic_result(
        {1: noisy_samples(0.002, N, 0)},
        {"fast": {"samples": {1: noisy_samples(0.0010, N, 7)}, "fidelity": top1_fidelity(1.0)},
         "quick": {"samples": {1: noisy_samples(0.0013, N, 8)}, "fidelity": top1_fidelity(1.0)}},
        baseline_role="champion")
    result = dataclasses.replace(
        result, baseline=dataclasses.replace(result.baseline, label="champion-v3"))
    decision = evaluate_gate(result)
    assert decision.chosen == "fast" and decision.verdict("quick").promote
    candidates = [Candidate(label, "savedmodel", "fp32", "savedmodel", "tensorflow", f"/m/{label}",
                            "tf.saved_model.load(path).signatures['serving_default']")
                  for label in ("fast", "quick")]
    return result, decision, candidate_rows(result, decision, candidates)


TITLE = ReportTitle(registered_model="digits", alias="champion", source="s3://models/digits",
                    created="2026-11-29 10:00 UTC",
                    load="tf.saved_model.load(path).signatures['serving_default']")


def test_the_title_block_and_the_verdict_come_before_any_table():
    result, decision, rows = _two_passing()
    markdown = render_markdown(result, decision, candidate_rows=rows, title=TITLE)
    head = markdown.split("\n|")[0]  # everything before the first table
    assert markdown.startswith("# digits: optimization report\n")
    for line in ("**Model:** digits (alias `champion`)", "**Source:** `s3://models/digits`",
                 f"**Digest:** `{result.accuracy_reference.digest}`",
                 "**Replaces:** champion-v3", "**Date:** 2026-11-29 10:00 UTC",
                 "**Gate: PROMOTE fast.**"):
        assert line in head


def test_only_the_chosen_candidate_is_marked_promoted():
    result, decision, rows = _two_passing()
    markdown = render_markdown(result, decision, candidate_rows=rows, title=TITLE)
    assert markdown.count("PROMOTED") == 2  # its candidates-table row and its verdict heading
    table = markdown.split("## Candidates")[1].split("##")[0]
    fast_row = next(line for line in table.splitlines() if line.startswith("| fast |"))
    quick_row = next(line for line in table.splitlines() if line.startswith("| quick |"))
    assert "| PROMOTED |" in fast_row and "| passed, not chosen |" in quick_row
    assert "### fast: PROMOTED" in markdown and "### quick: passed, not chosen" in markdown
    assert "PROMOTE quick" not in markdown and "| chosen |" not in markdown


def test_the_chosen_speedup_has_one_figure_everywhere_in_the_report():
    result, decision, rows = _two_passing()
    markdown = render_markdown(result, decision, candidate_rows=rows, title=TITLE)
    interval = decision.intervals["fast"][1]
    figure = speedup_text(interval)
    # the head, the candidates table, the before/after table, the check, the latency detail
    assert markdown.count(figure) == 5
    # the ratio of the two p50s is another estimate (2.02x here against the gate's 2.03x)
    p50_ratio = result.baseline.latency[1].p50 / result.candidate("fast").latency[1].p50
    assert f"{p50_ratio:.2f}" != f"{interval.speedup:.2f}"
    assert f"{p50_ratio:.2f}x faster" not in markdown
    assert f"{interval.speedup:.3f}x" not in markdown


def test_the_next_steps_name_the_registered_model_and_alias():
    result, decision, rows = _two_passing()
    markdown = render_markdown(result, decision, candidate_rows=rows, title=TITLE)
    steps = markdown.split("## What to do next")[1].split("\n## ")[0]
    assert "tf.saved_model.load(path).signatures['serving_default']" in steps
    assert "`mlflow models serve -m models:/digits@champion`" in steps
    assert "MlflowClient().set_registered_model_alias('digits', 'champion', '3')" in steps
    assert markdown.index("## What to do next") < markdown.index("## Candidates")
