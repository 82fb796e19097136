"""``tfopt optimize SRC DST --targets savedmodel,litert,onnx,openvino``: build candidates, let the
gate choose. Its flags, and the text it prints; what it does is
:func:`tfopt.optimizer.optimize.with_targets.optimize_with_targets` (whose docstring says what DST
holds), which returns an :class:`~tfopt.optimizer.optimize.with_targets.OptimizeOutcome` printed here.
"""

from __future__ import annotations

from tfopt.components.cli.output import human_bytes, table
from tfopt.components.cli.settings_flags import setting_flag
from tfopt.optimizer.benchmark.settings import BenchmarkConfig
from tfopt.optimizer.gate.verdict import GateConfig
from tfopt.optimizer.search.precision.settings import (
    PRECISION_SEARCH_MODES,
    PrecisionSearchSettings,
)


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
                           "with the onnx, litert and openvino targets, onnx_mixed_int8, "
                           "litert_mixed_int8 and openvino_mixed_int8 candidates: int8 with the "
                           "layers a search keeps in "
                           "float (docs/precision_search.md); {description}"))
    group.add_argument("--tune", action="store_true",
                       help="search thread settings for the chosen candidate and write "
                            "DST/runtime_settings.json")


def _accuracy_header(rows: list[dict]) -> str:
    """What the accuracy column holds: the eval data's metric, or, without eval data, the
    candidate's top-1 agreement with SRC, which bounds its accuracy drop."""
    kinds = {r.get("accuracy_kind") for r in rows if r.get("accuracy_kind")}
    if kinds == {"top1_agreement_with_input"}:
        return "agreement"
    return f"accuracy ({', '.join(sorted(kinds))})" if kinds else "accuracy"


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


def _print_input_and_budget(held: dict) -> None:
    budget = "not checked" if held["accuracy_budget"] is None \
        else f"a drop of at most {held['accuracy_budget']:g}"
    if held["accuracy_kind"] == "top1_agreement_with_input":
        print("accuracy     no eval data: agreement with SRC's top-1 bounds each "
              f"candidate's drop (1 - agreement); budget {budget}")
    elif held["accuracy_kind"] is not None:
        print(f"accuracy     input {held['accuracy_kind']} {held['input_accuracy']:.4f} on the "
              f"eval data; budget {budget}")


def print_precision(label: str, outcome) -> None:
    """One line per precision search, as it ends."""
    from tfopt.optimizer.optimize.candidates_stage import describe_outcome

    print(f"precision    {describe_outcome(label, outcome)}")


def print_outcome(outcome, source: str, dst: str) -> None:
    """The candidates' table, what they were held to, and what was chosen and written."""
    rows = outcome.rows
    _print_rows(rows)
    _print_input_and_budget({"accuracy_kind": outcome.accuracy_kind,
                             "input_accuracy": outcome.input_accuracy,
                             "accuracy_budget": outcome.accuracy_budget})
    chosen = outcome.chosen
    if chosen is None:
        print(f"no candidate passed the gate; nothing written at {dst}; "
              f"see {outcome.candidates_file}")
        return
    if outcome.runtime_settings is not None:
        _print_tuned(outcome.runtime_settings)
    print(f"chosen       {chosen.label} ({chosen.format}, {chosen.runtime}): "
          f"{outcome.speedup:.2f}x vs {source}")
    print(f"load with    {outcome.load_with}")
    print(f"wrote        {outcome.written}")


def _print_tuned(settings) -> None:
    print(f"runtime      best threads {settings.threads.label}; recommended batch "
          f"{settings.recommended_batch_size or '-'} ({settings.batch_reason})")
