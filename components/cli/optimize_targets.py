"""``tfopt optimize SRC DST --targets savedmodel,litert,onnx,openvino``: build candidates, let the
gate choose.

The optimized float32 SavedModel (recipe or search, checked for equivalence as always) and the
candidates the targets allow (:mod:`tfopt.optimizer.candidates.build`) are benchmarked against SRC in one
process and evaluated (held-out accuracy with ``--eval-data``, agreement with SRC's top-1
without); int8 candidates calibrate on ``--calibration-data`` (inputs only), else on the eval
data's inputs, else on inputs generated from the signature, and say which
(:mod:`tfopt.optimizer.inputs.calibration`); the gate chooses the fastest that is faster with confidence
and inside ``--accuracy-budget`` (:mod:`tfopt.optimizer.gate.selection`). DST is a directory, written
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

from tfopt.components.cli.model_scan_flags import scan_policy
from tfopt.components.cli.output import human_bytes, table
from tfopt.components.cli.settings_flags import setting_flag
from tfopt.optimizer.benchmark.settings import BenchmarkConfig
from tfopt.optimizer.gate.verdict import GateConfig
from tfopt.optimizer.search.precision.settings import (
    PRECISION_SEARCH_MODES,
    PrecisionSearchSettings,
)

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
    group.add_argument("--accuracy-budget", type=float, dest="accuracy_budget", metavar="DROP",
                       **setting_flag(GateConfig, "max_accuracy_drop_abs"))
    group.add_argument("--min-speedup", type=float, dest="min_speedup",
                       **setting_flag(GateConfig, "min_speedup"))
    group.add_argument("--seconds", type=float,
                       **setting_flag(BenchmarkConfig, "min_seconds",
                                      "benchmark: {description}"))
    group.add_argument("--precision-search", dest="precision_search",
                       choices=PRECISION_SEARCH_MODES, **setting_flag(
                           PrecisionSearchSettings, "mode",
                           "with the onnx, litert and openvino targets, their *_mixed_int8 "
                           "candidates: int8 with the layers a search keeps in "
                           "float (docs/precision_search.md); {description}"))
    group.add_argument("--tune", action="store_true",
                       help="search thread settings for the chosen candidate and write "
                            "DST/runtime_settings.json")


def check_arguments(args):
    """A bad target, an unreadable calibration file, or labels the gate's metric cannot score
    against the model's output, is an error before any work. Returns the eval data, read once
    (:class:`~tfopt.optimizer.verify.evaluation.LabelledData`, or None), for
    :func:`run_with_targets`."""
    from tfopt.optimizer.candidates.build import parse_targets
    from tfopt.optimizer.inputs.calibration import read_inputs
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.verify.evaluation import load_labelled_data

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
    from tfopt.optimizer.inputs.calibration import choose_calibration

    if not settings.calibrates and not _searched_targets(args, settings):
        return None
    return choose_calibration(signature, settings.calibration_samples,
                              calibration_data=args.calibration_data, eval_data=args.eval_data)


def _accuracy_header(rows: list[dict]) -> str:
    """What the accuracy column holds: the eval data's metric, or, without eval data, the
    candidate's top-1 agreement with SRC, which bounds its accuracy drop."""
    kinds = {r.get("accuracy_kind") for r in rows if r.get("accuracy_kind")}
    if kinds == {"top1_agreement_with_input"}:
        return "agreement"
    return f"accuracy ({', '.join(sorted(kinds))})" if kinds else "accuracy"


def _searched_targets(args, settings) -> list[str]:
    """The targets whose mixed int8 candidate is searched, when asked for."""
    from tfopt.optimizer.search.precision.candidates import searched_targets

    return searched_targets(settings.targets, getattr(args, "precision_search", "off"))


def _precision_search(args, settings, calibration, eval_data, workdir: Path, policy,
                      built) -> dict:
    """label -> outcome of each mixed int8 candidate's search that ran
    (:mod:`tfopt.optimizer.search.precision.candidates`); a search that fails leaves the other
    candidates to the gate."""
    from tfopt.optimizer.errors import first_line
    from tfopt.optimizer.search.precision.candidates import TARGETS, mixed_candidate

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
            said = f"{label} off: {outcome.reason}"
        elif outcome.candidate is not None:
            said = (f"{outcome.strategy}: {label} keeps {len(outcome.candidate.float_layers)} "
                    f"of {len(outcome.table.layers)} layers in float "
                    f"({', '.join(outcome.candidate.float_layers)}); "
                    f"{len(outcome.result.tried)} assignments measured in "
                    f"{outcome.search_seconds:.1f}s")
        else:
            said = f"{outcome.strategy}: no {label} ({outcome.reason})"
        if not args.json:
            print(f"precision    {said}")
        if outcome.strategy == "off":
            continue  # nothing searched: nothing more to write
        outcomes[label] = outcome
    return outcomes


def _write_precision_search(outcomes: dict, path: Path) -> None:
    import json

    from tfopt.optimizer.files.atomic import atomic_file

    with atomic_file(path, overwrite=True) as staging:
        staging.write_text(json.dumps({label: outcome.to_dict()
                                       for label, outcome in outcomes.items()}, indent=2) + "\n")


def _print_rows(rows: list[dict]) -> None:
    lines = []
    for r in rows:
        if r["verdict"] == "skipped":
            lines.append([r["label"], "-", "-", "-", "-", "-", "skipped", r["reasons"][0]])
            continue
        accuracy = "-" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
        lines.append([r["label"], r["format"], r["calibration"] or "-",
                      f"{r['speedup']:.2f}x" if r["speedup"] else "-",
                      accuracy, human_bytes(r["size_bytes"]), r["verdict"],
                      "; ".join(r["reasons"])])
    print(table(["candidate", "format", "calibration", "speedup", _accuracy_header(rows),
                 "size", "verdict", "why not"], lines))


def _input_and_budget(rows: list[dict], budget: float | None) -> dict:
    """The accuracy the candidates are held to: SRC's on the eval data (or 1, the agreement of
    SRC with itself), and the budget."""
    measured = next((r for r in rows if r.get("accuracy_kind")), None)
    kind = measured["accuracy_kind"] if measured else None
    return {"accuracy_kind": kind,
            "input_accuracy": measured["baseline_accuracy"] if measured else None,
            "accuracy_budget": budget}


def _print_input_and_budget(held: dict) -> None:
    budget = "not checked" if held["accuracy_budget"] is None \
        else f"a drop of at most {held['accuracy_budget']:g}"
    if held["accuracy_kind"] == "top1_agreement_with_input":
        print("accuracy     no eval data: agreement with SRC's top-1 bounds each "
              f"candidate's drop (1 - agreement); budget {budget}")
    elif held["accuracy_kind"] is not None:
        print(f"accuracy     input {held['accuracy_kind']} {held['input_accuracy']:.4f} on the "
              f"eval data; budget {budget}")


def run_with_targets(args, result, runtime=None, costs: dict | None = None,
                     eval_data=None, document: dict | None = None) -> int:
    """``result`` is the accepted :class:`~tfopt.optimizer.optimize.flow.OptimizeResult`; ``runtime`` the
    thread settings applied before TensorFlow started; ``costs`` gets each stage's
    :class:`~tfopt.optimizer.system.process_tree.Cost`; ``eval_data`` what :func:`check_arguments`
    read from ``--eval-data``; ``document`` gets what the text says, for ``--json``."""
    from tfopt.components.cli.stage_lines import stages_of
    from tfopt.optimizer.candidates.build import (
        CandidateSettings,
        derive_candidates,
        parse_targets,
        savedmodel_load_instructions,
    )
    from tfopt.optimizer.candidates.candidate import Candidate
    from tfopt.optimizer.files.atomic import atomic_directory, check_writable
    from tfopt.optimizer.gate.selection import select_candidate
    from tfopt.optimizer.gate.verdict import EXIT_REJECT
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.optimize.flow import write_optimized
    from tfopt.optimizer.system.process_tree import TreeMeter

    stages = stages_of(args)
    document = {} if document is None else document
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
        with stages.stage("candidates"), TreeMeter() as meter:
            derived, skipped = derive_candidates(
                args.src, result.candidate.model, workdir, settings, signature=args.signature,
                calibration=calibration, budget=getattr(args, "budget", None), policy=policy)
        costs["candidates"] = meter.cost
        with stages.stage("precision search"), TreeMeter() as meter:
            precision = _precision_search(args, settings, calibration, eval_data, workdir,
                                          policy, {c.label: c.path for c in derived})
        if precision:
            costs["precision search"] = meter.cost
            document["precision_search"] = {label: outcome.to_dict()
                                            for label, outcome in precision.items()}
            derived += [o.candidate for o in precision.values() if o.candidate is not None]
        candidates = ([optimized] if "savedmodel" in settings.targets else []) + derived
        with stages.stage("benchmark+evaluate"), TreeMeter() as meter:
            selection = select_candidate(
                args.src, candidates, gate,
                BenchmarkConfig(min_seconds=args.seconds, signature=args.signature),
                skipped=skipped, eval_data=eval_data, runtime=runtime,
                progress=lambda message: log.info("benchmark: %s", message),
                budget=getattr(args, "budget", None), policy=policy)
        costs["benchmark+evaluate"] = meter.cost
        rows = selection.rows()
        held = _input_and_budget(rows, gate.max_accuracy_drop_abs)
        chosen = selection.chosen
        document.update(held, written=None, runtime_settings=None)
        if not args.json:
            _print_rows(rows)
            _print_input_and_budget(held)
        if chosen is None:
            beside = selection.write_json(dst.parent / f"{dst.name}.{CANDIDATES_FILE}", kept={})
            if precision:
                _write_precision_search(precision,
                                        dst.parent / f"{dst.name}.{PRECISION_SEARCH_FILE}")
            document.update(selection.to_dict(kept={}), candidates_file=str(beside))
            if not args.json:
                print(f"no candidate passed the gate; nothing written at {dst}; see {beside}")
            return EXIT_REJECT
        is_file = chosen.artifact_dir != Path(chosen.path)
        final = dst / Path(chosen.path).name if is_file else dst
        with atomic_directory(dst, overwrite=args.overwrite) as staging:
            shutil.copytree(chosen.artifact_dir, staging)
            selection.write_json(staging / CANDIDATES_FILE, kept={chosen.label: str(final)})
            if precision:
                _write_precision_search(precision, staging / PRECISION_SEARCH_FILE)
            if args.tune:
                with stages.stage("tune"), TreeMeter() as meter:
                    tuned = _tune(staging, staging / Path(chosen.path).name if is_file
                                  else staging, args.signature, policy,
                                  getattr(args, "budget", None))
                costs["tune"] = meter.cost
                document["runtime_settings"] = tuned.to_dict()
        speedup = selection.decision.verdict(chosen.label).speedup
        load_with = chosen.how_to_load.strip().splitlines()[-1]
        document.update(selection.to_dict(kept={chosen.label: str(final)}),
                        candidates_file=str(dst / CANDIDATES_FILE), speedup=speedup,
                        load_with=load_with, written=str(dst))
        if not args.json:
            if args.tune:
                _print_tuned(tuned)
            print(f"chosen       {chosen.label} ({chosen.format}, {chosen.runtime}): "
                  f"{speedup:.2f}x vs {args.src}")
            print(f"load with    {load_with}")
            print(f"wrote        {dst}")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _tune(directory: Path, model_path: Path, signature: str, policy, budget):
    from tfopt.optimizer.runtime_tuning import RUNTIME_SETTINGS_FILE, tune_runtime

    settings = tune_runtime(model_path, signature=signature,
                            progress=lambda message: log.info("tuning: %s", message),
                            policy=policy, budget=budget)
    settings.to_json(directory / RUNTIME_SETTINGS_FILE)
    return settings


def _print_tuned(settings) -> None:
    print(f"runtime      best threads {settings.threads.label}; recommended batch "
          f"{settings.recommended_batch_size or '-'} ({settings.batch_reason})")
