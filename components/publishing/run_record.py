"""What a publish writes into MLflow: the run's params, metrics and tags, each logged model's
metrics and tags, each version's tags and its one-line description.

Metrics are per model, ``<label>.<name>`` (the baseline's label is ``baseline``, whatever it
was benchmarked as, and beside a champion the unoptimized input's is ``input``):
``latency_{p50,p90,p99,mean}_ms_b<batch>``, ``throughput_b<batch>`` (items/s), ``size_bytes``,
``load_seconds``, ``{rss,peak_rss}_growth_bytes``, the metric on labelled data and
``fidelity_*`` against the baseline, and for candidates the gate's own measures:
``speedup_b<batch>`` with ``speedup_ci_{low,high}_b<batch>`` at the gate's confidence and
``accuracy_drop`` (as the gate's accuracy check measured it). A logged model carries its own
label's metrics, the same values linked to it (MLflow 3 logged-model metrics).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from tfopt.components.config.pipeline_config import FINGERPRINT_EXCLUDES
from tfopt.components.pipeline.artifacts import CandidateModel
from tfopt.components.publishing.publication import (
    CANDIDATE_TAG,
    PUBLISH_KEY_TAG,
    Publication,
)

TAG_LIMIT = 5000  # MLflow takes 8000 characters per tag value; summaries stay well below
REPORT_HTML = "report/report.html"


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value if isinstance(value, str) else json.dumps(value)
    return flat


def run_params(pub: Publication) -> dict[str, str]:
    # The same parts of the config as its fingerprint: params cannot change once logged, and a
    # rerun with another workdir, execution mode or URL of the same server is the same publish.
    config = pub.config.model_dump(mode="json", exclude=FINGERPRINT_EXCLUDES)
    return {**_flatten(config), "recipe": pub.model.recipe or "(none: frozen only)",
            "candidate": pub.model.label, "candidate_kind": pub.model.kind}


def metric_prefix(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-/ ]", "_", label)


def _interval(pub: Publication, label: str, batch: int):
    from tfopt.optimizer.benchmark.stats import RatioInterval

    recomputed = pub.decision.get("intervals", {}).get(label, {}).get(str(batch))
    if recomputed:
        return RatioInterval.from_dict(recomputed)
    return pub.result.ratios.get(label, {}).get(batch)


def _check(pub: Publication, label: str, name: str) -> dict[str, Any] | None:
    return next((c for c in pub.candidate_verdict(label).get("checks", [])
                 if c.get("name") == name), None)


def run_metrics(pub: Publication) -> dict[str, float]:
    result = pub.result
    metrics: dict[str, float] = {}
    for model in result.measured:
        prefix = ("baseline" if model is result.baseline
                  else "input" if model is result.reference else metric_prefix(model.label))
        for batch, summary in sorted(model.latency.items()):
            for stat in ("p50", "p90", "p99", "mean"):
                metrics[f"{prefix}.latency_{stat}_ms_b{batch}"] = getattr(summary, stat) * 1e3
            metrics[f"{prefix}.throughput_b{batch}"] = summary.throughput
            if model.role == "candidate":
                interval = _interval(pub, model.label, batch)
                if interval is not None:
                    metrics[f"{prefix}.speedup_b{batch}"] = interval.speedup
                    metrics[f"{prefix}.speedup_ci_low_b{batch}"] = 1 / interval.high
                    metrics[f"{prefix}.speedup_ci_high_b{batch}"] = (
                        1 / interval.low if interval.low > 0 else math.inf)
        metrics[f"{prefix}.size_bytes"] = model.size_bytes
        metrics[f"{prefix}.load_seconds"] = model.load_seconds
        if model.rss_growth_bytes is not None:
            metrics[f"{prefix}.rss_growth_bytes"] = model.rss_growth_bytes
        if model.peak_rss_growth_bytes is not None:
            metrics[f"{prefix}.peak_rss_growth_bytes"] = model.peak_rss_growth_bytes
        if model.quality is not None:
            metrics[f"{prefix}.{metric_prefix(model.quality.metric)}"] = model.quality.value
        if model.fidelity is not None:
            if model.fidelity.top1_agreement is not None:
                metrics[f"{prefix}.fidelity_top1_agreement"] = model.fidelity.top1_agreement
            metrics[f"{prefix}.fidelity_max_abs_diff"] = model.fidelity.max_abs_diff
            metrics[f"{prefix}.fidelity_max_rel_diff"] = model.fidelity.max_rel_diff
        drop = _check(pub, model.label, "accuracy_drop_abs") if model.role == "candidate" \
            else None
        if drop is not None and drop.get("measured") is not None:
            metrics[f"{prefix}.accuracy_drop"] = drop["measured"]
    metrics["gate.promote"] = 1.0 if pub.gate.promote else 0.0
    metrics.update(step_cost_metrics(pub.run_context.get("step_costs") or {}))
    return {k: float(v) for k, v in metrics.items() if math.isfinite(v)}


def step_cost_metrics(costs: dict[str, dict]) -> dict[str, float]:
    """``step.<name>.wall_seconds`` and ``step.<name>.peak_rss_bytes`` (the step's process
    tree) of every step before publish (publish's own cost is known only once it is done)."""
    metrics: dict[str, float] = {}
    for step, cost in costs.items():
        metrics[f"step.{step}.wall_seconds"] = cost["wall_seconds"]
        if cost.get("peak_rss_bytes") is not None:
            metrics[f"step.{step}.peak_rss_bytes"] = cost["peak_rss_bytes"]
    return metrics


def model_metrics(pub: Publication, model: CandidateModel) -> dict[str, float]:
    """The run's metrics of ``model``, which its logged model carries too."""
    prefix = metric_prefix(model.label) + "."
    return {k: v for k, v in run_metrics(pub).items() if k.startswith(prefix)}


def environment_tags(environment) -> dict[str, str]:
    runtime, cpus = environment.runtime, environment.runtime.cpus
    onednn = {True: "on", False: "off", None: "unknown"}[runtime.onednn_enabled]
    return {
        "env.cpu_model": environment.cpu_model or "unknown",
        "env.isa": ",".join(sorted(n for n, present in environment.isa.items() if present)),
        "env.cpus_available": str(cpus.available),
        "env.logical_cpus": str(cpus.logical_cpus),
        "env.cpu_quota": "none" if cpus.quota_cpus is None else f"{cpus.quota_cpus:g}",
        "env.tensorflow_version": environment.tensorflow_version,
        "env.onednn": onednn,
        "env.intra_op_threads": str(runtime.intra_op_threads),
        "env.inter_op_threads": str(runtime.inter_op_threads),
        "env.thread_settings_in_effect": str(runtime.settings_in_effect).lower(),
        "env.tfopt_version": environment.tfopt_version,
        "env.python_version": environment.python_version,
        "env.platform": environment.platform,
    }


def identity_tags(pub: Publication) -> dict[str, str]:
    """What finds and explains a run or version: its key, its DAG run, its source."""
    tags = {PUBLISH_KEY_TAG: pub.key, "tfopt.run_key": pub.run_key,
            "tfopt.source_uri": pub.pulled.uri, "tfopt.source_digest": pub.pulled.digest}
    for name in ("dag_id", "dag_run_id", "task_id", "run_type"):
        if pub.run_context.get(name):
            tags[f"tfopt.{name}"] = str(pub.run_context[name])
    if pub.pulled.version:
        tags["tfopt.source_version"] = str(pub.pulled.version)
    return tags


def report_link(experiment_id: str, run_id: str) -> str:
    """The MLflow UI's page of the run's report.html, relative to the UI's root."""
    return f"#/experiments/{experiment_id}/runs/{run_id}/artifactPath/{REPORT_HTML}"


def verdict_line(pub: Publication, model: CandidateModel) -> str:
    """``PROMOTE optimized: 1.42x faster than input (95% CI 1.31x-1.55x) at batch 1; accuracy
    drop 0.0000 (budget 0.01)``: the gate's verdict on ``model`` in one line."""
    verdict = pub.candidate_verdict(model.label)
    batch = pub.decision.get("latency_batch_size")
    parts = []
    interval = _interval(pub, model.label, batch) if batch is not None else None
    if interval is not None:
        fastest = f"{1 / interval.low:.2f}x" if interval.low > 0 else "inf"
        parts.append(f"{interval.speedup:.2f}x faster than {pub.result.baseline.label} "
                     f"({interval.confidence * 100:g}% CI {1 / interval.high:.2f}x-{fastest}) "
                     f"at batch {batch}")
    drop = _check(pub, model.label, "accuracy_drop_abs")
    if drop is not None:
        threshold = drop.get("threshold")
        budget = f"budget {threshold:g}" if threshold is not None else "no budget"
        parts.append(f"accuracy drop {drop.get('measured_text')} ({budget})")
    head = "PROMOTE" if verdict.get("promote") else "REJECT"
    return f"{head} {model.label}: " + ("; ".join(parts) or "not measured")


def lost_because(pub: Publication, model: CandidateModel) -> str:
    """Why the gate rejected ``model``: its failed checks' reasons."""
    failed = [c.get("reason", c.get("name", "?")) for c in
              pub.candidate_verdict(model.label).get("checks", []) if not c.get("passed")]
    return "; ".join(failed) or "not judged"


def run_tags(pub: Publication) -> dict[str, str]:
    result = pub.result
    return {
        **identity_tags(pub),
        "tfopt.verdict": pub.verdict,
        "tfopt.gate_summary": pub.gate.summary[:TAG_LIMIT],
        "tfopt.chosen": pub.gate.chosen or "",
        "tfopt.logged_model": pub.model.label,
        "tfopt.model_digest": pub.model.digest,
        "tfopt.baseline": result.baseline.label,
        "tfopt.baseline_role": result.baseline.role,
        "tfopt.baseline_digest": result.baseline.digest,
        "tfopt.baseline_format": result.baseline.format,
        "tfopt.baseline_runtime": result.baseline.runtime,
        "mlflow.note.content": (f"**{verdict_line(pub, pub.model)}**\n\n{pub.gate.summary}\n\n"
                                f"The report: `{REPORT_HTML}` in this run's artifacts.")[
                                    :TAG_LIMIT],
        "tfopt.logged_format": pub.model.format,
        **calibration_tag(pub.model),
        **environment_tags(result.environment),
        **pub.runtime_tags,
    }


def model_tags(pub: Publication, model: CandidateModel) -> dict[str, str]:
    """A logged model's tags: the publish it belongs to, and what it is."""
    verdict = pub.candidate_verdict(model.label)
    return {**identity_tags(pub), CANDIDATE_TAG: model.label,
            "tfopt.format": model.format, "tfopt.runtime": model.runtime,
            "tfopt.variant": model.variant, "tfopt.model_digest": model.digest,
            "tfopt.verdict": "promote" if verdict.get("promote") else "reject",
            "tfopt.load": pub.load_instructions(model)[:TAG_LIMIT],
            "mlflow.note.content": verdict_line(pub, model)[:TAG_LIMIT],
            **calibration_tag(model), **float_layers_tag(model)}


def version_tags(pub: Publication, model: CandidateModel) -> dict[str, str]:
    tags = {
        **identity_tags(pub),
        "tfopt.verdict": pub.verdict,
        "tfopt.role": pub.role,
        "tfopt.gate_summary": pub.gate.summary[:TAG_LIMIT],
        CANDIDATE_TAG: model.label,
        "tfopt.recipe": (model.recipe or "")[:TAG_LIMIT],
        "tfopt.model_digest": model.digest,
        "tfopt.format": model.format,
        "tfopt.runtime": model.runtime,
        "tfopt.variant": model.variant,
        "tfopt.signature": pub.config.signature,
        "tfopt.load": pub.load_instructions(model)[:TAG_LIMIT],
        **calibration_tag(model),
        **float_layers_tag(model),
        **(pub.runtime_tags if model.label == pub.gate.chosen else {}),
    }
    if not pub.gate.promote:
        tags["tfopt.lost_because"] = lost_because(pub, model)[:TAG_LIMIT]
    return tags


def calibration_tag(model: CandidateModel) -> dict[str, str]:
    """``tfopt.calibration``: what an int8 model was calibrated on, ``data`` or ``synthetic``
    (inputs generated from the signature, no data given); absent for the others."""
    return {"tfopt.calibration": model.calibration} if model.calibration else {}


def float_layers_tag(model: CandidateModel) -> dict[str, str]:
    """``tfopt.float_layers``: the layers a mixed int8 model (``onnx_mixed_int8``,
    :mod:`tfopt.optimizer.search.precision`) keeps in float, comma-separated; absent for the others."""
    if not model.float_layers:
        return {}
    return {"tfopt.float_layers": ",".join(model.float_layers)[:TAG_LIMIT]}


def version_description(pub: Publication, model: CandidateModel, experiment_id: str,
                        run_id: str) -> str:
    """What a reviewer opening the version reads: the verdict in one line, what the model is
    (format, runtime and the threads tuning chose), how to load it (the snippet with those
    threads), why a challenger lost, and the report's link. The tags say the same for
    machines."""
    lines = [f"**{verdict_line(pub, model)}**",
             f"Format: {model.format}; runtime: {model.runtime}{_tuned_threads(pub, model)}"]
    load = pub.load_instructions(model).strip()
    lines.append(f"Load: `{load}`" if "\n" not in load and "`" not in load
                 else f"Load:\n\n```python\n{load}\n```")
    if pub.decision.get("comparisons"):
        lines.append(f"Compared: {pub.decision['comparisons']}")
    if not pub.gate.promote:
        lines.append(f"Lost because: {lost_because(pub, model)}")
    lines.append(f"[Report]({report_link(experiment_id, run_id)}) "
                 f"(`runs:/{run_id}/{REPORT_HTML}`)")
    return "\n\n".join(lines)[:TAG_LIMIT]


def _tuned_threads(pub: Publication, model: CandidateModel) -> str:
    """`` (tuned: intra=1 inter=2)`` when tuning measured ``model``, else nothing."""
    if pub.runtime_settings_for(model) is None:
        return ""
    tags = pub.runtime_tags
    if "tfopt.runtime.num_threads" in tags:
        return f" (tuned: num_threads={tags['tfopt.runtime.num_threads']})"
    return (f" (tuned: intra-op {tags.get('tfopt.runtime.intra_op_threads')}, inter-op "
            f"{tags.get('tfopt.runtime.inter_op_threads')} threads)")
