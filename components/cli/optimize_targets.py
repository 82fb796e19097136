"""``tfopt optimize SRC DST --targets savedmodel,litert,onnx,openvino``: build candidates, let the
gate choose.

The optimized float32 SavedModel (recipe or search, checked for equivalence as always) and the
candidates the targets allow (:mod:`optimizer.candidates.build`) are benchmarked against SRC in one
process and evaluated (held-out accuracy with ``--eval-data``, agreement with SRC's top-1
without); int8 candidates calibrate on ``--calibration-data`` (inputs only), else on the eval
data's inputs, else on inputs generated from the signature, and say which
(:mod:`optimizer.inputs.calibration`); the gate chooses the fastest that is faster with confidence
and inside ``--accuracy-budget`` (:mod:`optimizer.gate.selection`). DST is a directory, written
atomically:

- the chosen SavedModel itself, or the chosen model's file(s) with its JSON sidecar
  (``model.tflite``, ``model.onnx``, or ``model.xml`` and ``model.bin``; plus ``<file>.json``);
- ``candidates.json``: every candidate with its format, latency, accuracy and verdict;
- ``runtime_settings.json`` with ``--tune``: the thread settings measured best for it;
- ``precision_search.json`` when the precision search ran (``--precision-search``): its table
  (each layer's costs and sensitivity), the assignments it built and measured (predicted and
  measured latency and error) and the float layers of ``onnx_mixed_int8`` and
  ``litert_mixed_int8``, by label.

When no candidate passes, nothing is written at DST; ``DST.candidates.json`` beside it says why,
and the exit code is 3, as for ``tfopt gate``.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from components.cli.model_scan_flags import scan_policy
from components.cli.output import human_bytes, table
from optimizer.search.precision.settings import PRECISION_SEARCH_MODES

log = logging.getLogger(__name__)

CANDIDATES_FILE = "candidates.json"
PRECISION_SEARCH_FILE = "precision_search.json"


def add_arguments(p) -> None:
    group = p.add_argument_group("candidates (with --targets)")
    group.add_argument("--targets", default=None, metavar="LIST",
                       help="build and measure candidates for these runtimes, comma-separated: "
                            "savedmodel (optimized fp32, bf16, XLA), litert (fp32, fp16, "
                            "dynamic-range int8, full int8), onnx (fp32, optimized, dynamic "
                            "int8, static int8) and/or openvino (fp32, bf16, int8); write the "
                            "fastest inside the accuracy budget at DST, and "
                            "DST/candidates.json")
    group.add_argument("--eval-data", default=None, dest="eval_data", metavar="FILE.npz",
                       help="labelled data (x, y) for held-out accuracy, and int8 calibration "
                            "without --calibration-data; without it accuracy is agreement with "
                            "SRC's top-1")
    group.add_argument("--calibration-data", default=None, dest="calibration_data",
                       metavar="FILE.npz",
                       help="inputs that calibrate int8 candidates, no labels: an .npz with x "
                            "(or one array per input key) or a TFRecord of them; default the "
                            "eval data's inputs, else inputs generated from the signature "
                            "(those candidates are tagged synthetic)")
    group.add_argument("--accuracy-budget", type=float, default=0.005, dest="accuracy_budget",
                       metavar="DROP", help="largest accuracy drop accepted, absolute (default "
                                            "0.005 = half a point)")
    group.add_argument("--min-speedup", type=float, default=1.05, dest="min_speedup",
                       help="the chosen candidate must be at least this much faster than SRC, "
                            "with confidence (default 1.05)")
    group.add_argument("--seconds", type=float, default=10.0,
                       help="benchmark: timed seconds at least (default 10)")
    group.add_argument("--precision-search", default="auto", dest="precision_search",
                       choices=PRECISION_SEARCH_MODES,
                       help="with the onnx and litert targets, onnx_mixed_int8 and "
                            "litert_mixed_int8 candidates: int8 with the layers a search keeps "
                            "in float (docs/precision_search.md)"
                            "; greedy: fall back the most sensitive layer until the budget "
                            "holds; relaxed: search by measured latency; auto (default): "
                            "relaxed when uniform int8 breaks --accuracy-budget and "
                            "--eval-data or --calibration-data is given, else off")
    group.add_argument("--tune", action="store_true",
                       help="search thread settings for the chosen candidate and write "
                            "DST/runtime_settings.json")


def check_arguments(args):
    """A bad target, an unreadable calibration file, or labels the gate's metric cannot score
    against the model's output, is an error before any work. Returns the eval data, read once
    (:class:`~optimizer.verify.evaluation.LabelledData`, or None), for
    :func:`run_with_targets`."""
    from optimizer.benchmark.harness import BenchmarkConfig
    from optimizer.candidates.build import parse_targets
    from optimizer.inputs.calibration import read_inputs
    from optimizer.model.savedmodel import get_signature
    from optimizer.verify.evaluation import load_labelled_data

    parse_targets(args.targets)
    if args.calibration_data is None and args.eval_data is None:
        return None
    signature = get_signature(args.src, args.signature, policy=scan_policy(args))
    if args.calibration_data is not None:
        read_inputs(args.calibration_data, signature)
    if args.eval_data is None:
        return None
    return load_labelled_data(args.eval_data, signature, BenchmarkConfig().metric)


def _calibration(signature, args, settings):
    from optimizer.inputs.calibration import choose_calibration

    if not settings.calibrates and not _searched_targets(args, settings):
        return None
    return choose_calibration(signature, settings.calibration_samples,
                              calibration_data=args.calibration_data, eval_data=args.eval_data)


def _searched_targets(args, settings) -> list[str]:
    """The targets whose mixed int8 candidate is searched: onnx and litert, when asked for."""
    if getattr(args, "precision_search", "off") == "off":
        return []
    return [t for t in ("onnx", "litert") if t in settings.targets]


def _precision_search(args, settings, calibration, eval_data, workdir: Path, policy,
                      built) -> dict:
    """label -> outcome of each mixed int8 candidate's search that ran
    (:mod:`optimizer.search.precision.candidates`); a search that fails leaves the other
    candidates to the gate."""
    from optimizer.errors import first_line
    from optimizer.search.precision.candidates import TARGETS, mixed_candidate
    from optimizer.search.precision.settings import PrecisionSearchSettings

    outcomes = {}
    for target in _searched_targets(args, settings):
        label = TARGETS[target][0]
        try:
            outcome = mixed_candidate(
                args.src, workdir, PrecisionSearchSettings(mode=args.precision_search),
                args.accuracy_budget, signature=args.signature, calibration=calibration,
                eval_data=eval_data, samples=settings.calibration_samples, policy=policy,
                built=built, target=target)
        except Exception as exc:  # noqa: BLE001 - a search that fails leaves the others
            log.warning("precision search failed, no %s: %s", label, first_line(exc))
            continue
        if outcome.strategy == "off":
            print(f"precision    {label} off: {outcome.reason}")
            continue  # nothing searched: nothing more to write
        if outcome.candidate is not None:
            print(f"precision    {outcome.strategy}: {label} keeps "
                  f"{len(outcome.candidate.float_layers)} of {len(outcome.table.layers)} layers "
                  f"in float ({', '.join(outcome.candidate.float_layers)}); "
                  f"{len(outcome.result.tried)} assignments measured in "
                  f"{outcome.search_seconds:.1f}s")
        else:
            print(f"precision    {outcome.strategy}: no {label} ({outcome.reason})")
        outcomes[label] = outcome
    return outcomes


def _write_precision_search(outcomes: dict, path: Path) -> None:
    import json

    from optimizer.files.atomic import atomic_file

    with atomic_file(path, overwrite=True) as staging:
        staging.write_text(json.dumps({label: outcome.to_dict()
                                       for label, outcome in outcomes.items()}, indent=2) + "\n")


def _print_rows(rows: list[dict]) -> None:
    lines = []
    for r in rows:
        if r["verdict"] == "skipped":
            lines.append([r["label"], "-", "-", "-", "-", "-", "skipped",
                          r["reasons"][0][:70]])
            continue
        accuracy = "-" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
        lines.append([r["label"], r["format"], r["calibration"] or "-",
                      f"{r['speedup']:.2f}x" if r["speedup"] else "-",
                      accuracy, human_bytes(r["size_bytes"]), r["verdict"],
                      "; ".join(r["reasons"])[:70]])
    print(table(["candidate", "format", "calibration", "speedup", "accuracy", "size", "verdict",
                 "why not"], lines))


def run_with_targets(args, result, runtime=None, costs: dict | None = None,
                     eval_data=None) -> int:
    """``result`` is the accepted :class:`~optimizer.optimize.flow.OptimizeResult`; ``runtime`` the
    thread settings applied before TensorFlow started; ``costs`` gets each stage's
    :class:`~optimizer.system.process_tree.Cost`; ``eval_data`` what :func:`check_arguments`
    read from ``--eval-data``."""
    from optimizer.benchmark.harness import BenchmarkConfig
    from optimizer.candidates.build import (
        CandidateSettings,
        derive_candidates,
        parse_targets,
        savedmodel_load_instructions,
    )
    from optimizer.candidates.candidate import Candidate
    from optimizer.files.atomic import atomic_directory, check_writable
    from optimizer.gate.selection import select_candidate
    from optimizer.gate.verdict import EXIT_REJECT, GateConfig
    from optimizer.model.savedmodel import get_signature
    from optimizer.optimize.flow import write_optimized
    from optimizer.system.process_tree import TreeMeter

    settings = CandidateSettings(targets=parse_targets(args.targets))
    policy = scan_policy(args)
    gate = GateConfig(max_accuracy_drop_abs=args.accuracy_budget, min_speedup=args.min_speedup)
    dst = check_writable(args.dst, args.overwrite)
    signature = get_signature(args.src, args.signature, policy=policy)
    dst.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f".{dst.name}.candidates-", dir=dst.parent))
    try:
        optimized_dir = write_optimized(result, workdir / "optimized")
        optimized = Candidate(label="optimized", target="savedmodel", variant="fp32",
                              format="savedmodel", runtime="tensorflow",
                              path=str(optimized_dir),
                              how_to_load=savedmodel_load_instructions(args.signature))
        costs = {} if costs is None else costs
        calibration = _calibration(signature, args, settings)
        with TreeMeter() as meter:
            derived, skipped = derive_candidates(
                args.src, result.candidate.model, workdir, settings, signature=args.signature,
                calibration=calibration, budget=getattr(args, "budget", None), policy=policy)
        costs["candidates"] = meter.cost
        with TreeMeter() as meter:
            precision = _precision_search(args, settings, calibration, eval_data, workdir,
                                          policy, {c.label: c.path for c in derived})
        if precision:
            costs["precision search"] = meter.cost
            derived += [o.candidate for o in precision.values() if o.candidate is not None]
        candidates = ([optimized] if "savedmodel" in settings.targets else []) + derived
        with TreeMeter() as meter:
            selection = select_candidate(
                args.src, candidates, gate,
                BenchmarkConfig(min_seconds=args.seconds, signature=args.signature),
                skipped=skipped, eval_data=eval_data, runtime=runtime,
                progress=lambda message: log.info("benchmark: %s", message),
                budget=getattr(args, "budget", None), policy=policy)
        costs["benchmark+evaluate"] = meter.cost
        rows = selection.rows()
        _print_rows(rows)
        chosen = selection.chosen
        if chosen is None:
            beside = selection.write_json(dst.parent / f"{dst.name}.{CANDIDATES_FILE}", kept={})
            if precision:
                _write_precision_search(precision,
                                        dst.parent / f"{dst.name}.{PRECISION_SEARCH_FILE}")
            print(f"no candidate passed the gate; nothing written at {dst}; see {beside}")
            return EXIT_REJECT
        is_file = chosen.artifact_dir != Path(chosen.path)
        with atomic_directory(dst, overwrite=args.overwrite) as staging:
            shutil.copytree(chosen.artifact_dir, staging)
            final = dst / Path(chosen.path).name if is_file else dst
            selection.write_json(staging / CANDIDATES_FILE, kept={chosen.label: str(final)})
            if precision:
                _write_precision_search(precision, staging / PRECISION_SEARCH_FILE)
            if args.tune:
                with TreeMeter() as meter:
                    _tune(staging, staging / Path(chosen.path).name if is_file else staging,
                          args.signature, policy, getattr(args, "budget", None))
                costs["tune"] = meter.cost
        print(f"chosen       {chosen.label} ({chosen.format}, {chosen.runtime}): "
              f"{selection.decision.verdict(chosen.label).speedup:.2f}x vs {args.src}")
        print(f"load with    {chosen.how_to_load.strip().splitlines()[-1]}")
        print(f"wrote        {dst}")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _tune(directory: Path, model_path: Path, signature: str, policy, budget) -> None:
    from optimizer.runtime_tuning import RUNTIME_SETTINGS_FILE, tune_runtime

    settings = tune_runtime(model_path, signature=signature,
                            progress=lambda message: log.info("tuning: %s", message),
                            policy=policy, budget=budget)
    settings.to_json(directory / RUNTIME_SETTINGS_FILE)
    threads = settings.threads
    print(f"runtime      best threads {threads.label}; recommended batch "
          f"{settings.recommended_batch_size or '-'} ({settings.batch_reason})")
