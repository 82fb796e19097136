"""tfopt gate RESULT.json: promote or reject, with every check and its reason."""

from __future__ import annotations

import argparse
import json


def add_parser(sub) -> None:
    p = sub.add_parser(
        "gate", help="decide from a benchmark RESULT.json whether a candidate is promoted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Apply the quality gate to RESULT.json (written by `tfopt benchmark "
                    "--json-file`).\nA candidate is promoted only if every check passes: a speedup "
                    "of at least\nmin_speedup shown with confidence, no regression at the other "
                    "batch sizes, the\naccuracy drop within budget, and the optional size and "
                    "memory limits.\nEvery check is printed with its measured value, threshold "
                    "and reason.",
        epilog="Exit codes: 0 a candidate is promoted; 3 rejected (keep the baseline);\n"
               "2 bad input (unreadable RESULT.json or gate config). See docs/gate.md.")
    p.add_argument("result", metavar="RESULT.json", help="benchmark result")
    p.add_argument("--config", metavar="FILE",
                   help="gate thresholds as YAML (min_speedup, confidence, "
                        "max_accuracy_drop_abs, ...); defaults otherwise")
    p.add_argument("--json", action="store_true",
                   help="print the decision as JSON instead of text")
    p.add_argument("--json-file", dest="json_out", metavar="OUT",
                   help="also write the decision as JSON to OUT")
    p.set_defaults(run=run)


def run(args) -> int:
    from tfopt.optimizer.benchmark.result import load_result
    from tfopt.optimizer.gate.verdict import GateConfig, evaluate_gate, load_gate_config

    config = load_gate_config(args.config) if args.config else GateConfig()
    result = load_result(args.result)
    decision = evaluate_gate(result, config)
    document = {"baseline": {"label": result.baseline.label, "role": result.baseline.role},
                **decision.to_dict()}
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        _print_decision(result, decision)
    if args.json_out:
        from tfopt.optimizer.files.atomic import atomic_file

        with atomic_file(args.json_out, overwrite=True) as staging:
            staging.write_text(json.dumps(decision.to_dict(), indent=2) + "\n")
    return decision.exit_code


def _print_decision(result, decision) -> None:
    print(f"baseline     {result.baseline.label} ({result.baseline.role})")
    print(f"compared     {decision.comparisons}")
    for verdict in decision.verdicts:
        print()
        print(f"candidate    {verdict.candidate}: "
              f"{'PROMOTE' if verdict.promote else 'REJECT'}")
        for check in verdict.checks:
            print(f"  {check.line()}")
    print()
    if decision.promote:
        print(f"decision     PROMOTE {decision.chosen}")
    else:
        print("decision     REJECT: no candidate passes every check; keep the baseline")
