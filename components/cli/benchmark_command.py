"""tfopt benchmark BASELINE CANDIDATE...: interleaved latency, accuracy, size and memory.

Writes the RESULT.json that ``tfopt gate`` reads (``--json-file``) and a report directory with
Markdown, PNG charts and a per-op profile (``--report``). Thread settings are applied before
TensorFlow starts, so this command owns the process's TF runtime.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tfopt.components.cli.call_deadline_flag import (
    add_model_call_seconds_argument,
    apply_call_deadline,
)
from tfopt.components.cli.model_scan_flags import add_allow_op_argument, scan_policy
from tfopt.components.cli.output import human_bytes, table
from tfopt.components.cli.settings_flags import setting_flag
from tfopt.components.cli.stage_lines import load_tensorflow, stages_of
from tfopt.optimizer.benchmark.settings import BenchmarkConfig
from tfopt.optimizer.gate.verdict import GateConfig
from tfopt.optimizer.records import default_of


def _default(name: str):
    return default_of(BenchmarkConfig, name)


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive integers: {text!r}")
    return tuple(dict.fromkeys(sizes))


def add_parser(sub) -> None:
    p = sub.add_parser(
        "benchmark", help="compare a baseline with candidates: latency, accuracy, size, memory",
        description="Time BASELINE and each CANDIDATE (SavedModel directories) in one process, "
                    "interleaved in blocks of consecutive calls so that background load hits "
                    "all alike and each model runs warm, as served; report "
                    "p50/p90/p99/mean latency and throughput per batch size, a confidence "
                    "interval for each candidate's speedup, load time, size, RSS growth, and "
                    "accuracy (with --eval-data) or fidelity to the baseline. Progress goes to "
                    "stderr every few seconds.")
    p.add_argument("baseline", help="SavedModel directory the candidates must beat")
    p.add_argument("candidates", nargs="+", metavar="candidate", help="SavedModel directory")
    p.add_argument("--baseline-role", choices=["input", "champion"], default="input",
                   help="what the baseline is: the unoptimized input (default) or the current "
                        "production model")
    p.add_argument("--batch-sizes", type=_batch_sizes, **setting_flag(
        BenchmarkConfig, "batch_sizes", "comma-separated batch sizes to time, e.g. 1,32; "
                                        "{description}"))
    p.add_argument("--eval-data", help="labelled data: .npz with x/y, or a TFRecord of "
                                       "tf.train.Example with x (floats) and y (int64)")
    p.add_argument("--metric", default=_default("metric"),
                   help="metric on --eval-data (top1, mse, mae; default %(default)s)")
    p.add_argument("--json", action="store_true",
                   help="print the result and the gate's decision as JSON instead of text")
    p.add_argument("--json-file", dest="json_out", metavar="OUT",
                   help="write RESULT.json here (what tfopt gate reads)")
    p.add_argument("--report", metavar="DIR",
                   help="write report.html, report.md, report.json and charts")
    p.add_argument("--gate-config", metavar="FILE",
                   help="gate thresholds (YAML) for the report's verdict; default thresholds "
                        "otherwise")
    p.add_argument("--no-profile", action="store_true",
                   help="leave the per-op profile out of the report")
    p.add_argument("--min-runs", type=int, default=_default("min_runs"),
                   help="timed rounds at least (default %(default)s); a round is one block of "
                        "each model")
    p.add_argument("--block-size", type=int, default=_default("block_size"), dest="block_size",
                   help="consecutive timed calls per model per round, after one untimed call "
                        "(default %(default)s; 1: one call per model per round)")
    p.add_argument("--min-seconds", type=float, default=_default("min_seconds"),
                   help="timed seconds per batch size at least (default %(default)g)")
    p.add_argument("--block-seconds", type=float, default=_default("block_seconds"),
                   help="a block shrinks to the calls that take about this long, for models "
                        "slower than block-seconds / block-size a call (default %(default)g; "
                        "0: always --block-size calls)")
    p.add_argument("--max-seconds", type=float, default=_default("max_seconds"),
                   help="time on, up to this many seconds per batch size, while a candidate's "
                        "interval straddles the promotion bound (default 4 x --min-seconds; "
                        "0: stop at --min-runs and --min-seconds)")
    p.add_argument("--no-twin", dest="twin", action="store_false", default=_default("twin"),
                   help="do not time a second load of the baseline (the twin the gate's bound "
                        "is widened by, docs/gate.md)")
    p.add_argument("--warmup", type=int, default=_default("warmup"),
                   help="untimed calls per model (default %(default)s)")
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads (default: the CPUs really available to this process: "
                        "affinity and cgroup quota)")
    p.add_argument("--inter-op-threads", type=int, default=1, help="inter-op threads (default 1)")
    p.add_argument("--onednn", choices=["on", "off"], default=None,
                   help="set TF_ENABLE_ONEDNN_OPTS (default: leave the environment's choice)")
    # None: not given, so that a --gate-config's confidence can be the one level
    p.add_argument("--confidence", type=float, **setting_flag(
        GateConfig, "confidence", "{description}; default the --gate-config's", default=None))
    p.add_argument("--signature", default=_default("signature"),
                   help="signature to call (default %(default)s)")
    add_allow_op_argument(p)
    add_model_call_seconds_argument(p)
    p.set_defaults(run=run)


def _check_inputs(args, policy) -> None:
    """Fail on bad paths and options before TensorFlow starts or anything is timed."""
    from tfopt.optimizer.errors import InvalidInputsError
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.verify.evaluation import get_metric

    baseline = get_signature(args.baseline, args.signature, policy=policy)
    for path in args.candidates:
        signature = get_signature(path, args.signature, policy=policy)
        if not signature.same_contract(baseline):
            raise InvalidInputsError(f"{path} has signature {signature.describe()}, but the "
                                     f"baseline has {baseline.describe()}")
    get_metric(args.metric)
    for name in ("min_runs", "block_size", "warmup", "threads", "inter_op_threads"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            raise InvalidInputsError(f"--{name.replace('_', '-')} must be positive, got {value}")
    for name in ("min_seconds", "block_seconds", "max_seconds"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise InvalidInputsError(f"--{name.replace('_', '-')} must not be negative, "
                                     f"got {value}")
    if args.confidence is not None and not 0.5 < args.confidence < 1:
        raise InvalidInputsError(f"--confidence must be in (0.5, 1), got {args.confidence}")


def _gate_config(args):
    """The gate's thresholds; its confidence is the benchmark's too, one level: --confidence,
    else the --gate-config's, else the default. Both given and different: an error."""
    from tfopt.optimizer.errors import InvalidInputsError
    from tfopt.optimizer.gate.verdict import load_gate_config

    gate_config = load_gate_config(args.gate_config) if args.gate_config else GateConfig()
    if args.confidence is None:
        return gate_config
    if "confidence" in gate_config.model_fields_set and gate_config.confidence != args.confidence:
        raise InvalidInputsError(f"--confidence {args.confidence:g} differs from the "
                                 f"--gate-config's confidence {gate_config.confidence:g}: "
                                 f"give one (a single level times and decides)")
    return gate_config.model_copy(update={"confidence": args.confidence})


def run(args) -> int:
    from tfopt.optimizer.system.cpu_threads import (
        apply_runtime_settings,
        default_runtime_settings,
        export_env,
    )

    apply_call_deadline(args)  # before any model is called
    onednn = None if args.onednn is None else args.onednn == "on"
    settings = default_runtime_settings(args.threads, inter_op_threads=args.inter_op_threads,
                                        onednn=onednn)
    export_env(settings)  # before the checks below import TensorFlow

    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.verify.evaluation import load_labelled_data

    stages = stages_of(args)
    policy = scan_policy(args)
    with stages.stage("check inputs"):
        _check_inputs(args, policy)
        gate_config = _gate_config(args)
    config = BenchmarkConfig(batch_sizes=args.batch_sizes, warmup=args.warmup,
                             min_runs=args.min_runs, min_seconds=args.min_seconds,
                             block_size=args.block_size, block_seconds=args.block_seconds,
                             max_seconds=args.max_seconds, twin=args.twin,
                             confidence=gate_config.confidence, metric=args.metric,
                             signature=args.signature)  # the library's bounds, checked now
    eval_data = None
    if args.eval_data:
        eval_data = load_labelled_data(args.eval_data, get_signature(
            args.baseline, args.signature, policy=policy), config.metric)
    load_tensorflow(stages)
    runtime = apply_runtime_settings(settings)

    from tfopt.optimizer.benchmark.harness import Subject, run_benchmark
    from tfopt.optimizer.gate.near_ties import precision_of_label, precision_rank
    from tfopt.optimizer.gate.verdict import evaluate_gate

    # model files have no candidate records: their precision is read from their names, as
    # the gate reads it from the labels (the files' names) on a near tie
    candidates = [Subject.candidate(c, precision_rank=precision_rank(
        precision_of_label(Path(c).name))) for c in args.candidates]
    with stages.stage("benchmark"):
        result = run_benchmark(Subject.baseline(args.baseline, args.baseline_role),
                               candidates, config, runtime=runtime, eval_data=eval_data,
                               progress=stages.say, policy=policy)
    if args.json_out:
        result.save(args.json_out)
    decision = evaluate_gate(result, gate_config)
    if not args.json:
        _print_summary(result, decision)
    report = None
    if args.report:
        with stages.stage("report"):
            profiles = [] if args.no_profile else _profiles(result, decision, eval_data,
                                                            policy, stages.say)
            from tfopt.optimizer.report.write import write_report

            report = write_report(result, args.report, decision, profiles).markdown
    if args.json:
        print(json.dumps({"result": result.to_dict(), "gate": decision.to_dict(),
                          "environment": result.environment.summary(),
                          "report": str(report) if report else None,
                          "result_file": args.json_out}, indent=2))
        return 0
    if report:
        print(f"report       {report}")
    if args.json_out:
        print(f"result       {args.json_out}")
    return 0


def _profiles(result, decision, eval_data, policy, say):
    from tfopt.optimizer.inputs.generated import make_inputs
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.report.profile import profile_baseline_and_candidate

    target = decision.chosen or max(decision.verdicts, key=lambda v: v.speedup or 0).candidate
    signature = get_signature(result.baseline.path, result.settings.signature, policy=policy)
    batch = min(result.settings.batch_sizes)
    if eval_data is not None and len(signature.inputs) == 1:
        spec = signature.inputs[0]
        feeds = {spec.key: eval_data.x[:batch].astype(spec.numpy_dtype, copy=False)}
    else:
        feeds = make_inputs(signature, batch)
    say(f"profiling ops of {result.baseline.label} and {target}")
    return profile_baseline_and_candidate(result, target, feeds, policy=policy)


def _print_summary(result, decision) -> None:
    base = result.baseline
    rows = []
    for batch in sorted(result.settings.batch_sizes):
        for m in result.models:
            s = m.latency[batch]
            ratio = result.ratios.get(m.label, {}).get(batch)
            speedup = (f"{ratio.speedup:.3f}x [{1 / ratio.high:.3f}-{1 / ratio.low:.3f}]"
                       if ratio else "baseline")
            rows.append([batch, m.label, s.runs, f"{s.p50 * 1e3:.3f}", f"{s.p90 * 1e3:.3f}",
                         f"{s.p99 * 1e3:.3f}", f"{s.mean * 1e3:.3f}", f"{s.throughput:.1f}",
                         speedup])
    conf = f"{result.settings.confidence * 100:g}% CI"
    print(table(["batch", "model", "runs", "p50 ms", "p90 ms", "p99 ms", "mean ms", "items/s",
                 f"speedup [{conf}]"], rows))
    print()
    model_rows = []
    for m in result.models:
        quality = f"{m.quality.metric} {m.quality.value:.4f}" if m.quality else "-"
        if m.fidelity:
            top1 = m.fidelity.top1_agreement
            quality += (f"; agreement {top1:.4f}" if top1 is not None else "") + \
                f"; max abs err {m.fidelity.max_abs_diff:.3g}"
        model_rows.append([m.label, m.role, human_bytes(m.size_bytes),
                           f"{m.load_seconds * 1e3:.0f} ms",
                           human_bytes(m.peak_rss_growth_bytes)
                           if m.peak_rss_growth_bytes is not None else "n/a", quality])
    print(table(["model", "role", "size", "load", "peak RSS growth", "quality"], model_rows))
    print()
    print(f"environment  {result.environment.summary()}")
    print(f"baseline     {base.label} ({base.role})")
    for verdict in decision.verdicts:
        print(f"gate         {verdict.summary()}")
