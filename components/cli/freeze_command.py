"""tfopt freeze SRC DST: variables to constants, written back with the same signature."""

from __future__ import annotations

import json

from tfopt.components.cli.call_deadline_flag import (
    add_model_call_seconds_argument,
    apply_call_deadline,
)
from tfopt.components.cli.model_scan_flags import add_allow_op_argument, scan_policy
from tfopt.components.cli.output import human_bytes
from tfopt.components.cli.settings_flags import setting_flag
from tfopt.optimizer.benchmark.settings import BenchmarkConfig
from tfopt.optimizer.verify.tolerance import Tolerance


def add_parser(sub) -> None:
    p = sub.add_parser("freeze", help="freeze a SavedModel signature into a constant graph",
                       description="Freeze one signature of SRC (variables become constants, "
                                   "training-only nodes are dropped, control flow is kept) and "
                                   "write it to DST as a SavedModel with the same signature. "
                                   "The outputs are checked against SRC before DST is written.")
    p.add_argument("src", help="SavedModel directory")
    p.add_argument("dst", help="SavedModel directory to create")
    p.add_argument("--signature", **setting_flag(BenchmarkConfig, "signature",
                                                 "signature to freeze"))
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("--atol", type=float, **setting_flag(
        Tolerance, "atol", "largest absolute output difference accepted: the {description}"))
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead")
    add_allow_op_argument(p)
    add_model_call_seconds_argument(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from tfopt.components.cli.stage_lines import load_tensorflow, stages_of
    from tfopt.optimizer.errors import EquivalenceError
    from tfopt.optimizer.files.atomic import check_writable
    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.model.savedmodel import directory_size
    from tfopt.optimizer.verify.equivalence import compare

    apply_call_deadline(args)  # before any model is called
    stages = stages_of(args)
    tolerance = Tolerance(atol=args.atol)  # a bad bound is exit 2 before any work
    check_writable(args.dst, args.overwrite)
    policy = scan_policy(args)
    load_tensorflow(stages)
    with stages.stage("freeze"):
        frozen = freeze(args.src, args.signature, policy=policy)
    with stages.stage("check"):
        report = compare(args.src, frozen, signature_name=args.signature, policy=policy)
    if not args.json:
        print(f"equivalence  {report.summary()}")
    if not tolerance.accepts(report):
        raise EquivalenceError(
            f"frozen outputs differ from {args.src} by {report.max_abs_diff:.3g} "
            f"(> --atol {args.atol:g}); nothing written")
    with stages.stage("write"):
        write_saved_model(frozen, args.dst, overwrite=args.overwrite)
    before, after = directory_size(args.src), directory_size(args.dst)
    if args.json:
        print(json.dumps({"equivalence": report.to_dict(), "tolerance": tolerance.to_dict(),
                          "signature": frozen.signature.to_dict(),
                          "nodes": len(frozen.graph_def.node), "size_bytes_before": before,
                          "size_bytes_after": after, "written": str(args.dst)}, indent=2))
        return 0
    print(f"signature    {frozen.signature.describe()}")
    print(f"nodes        {len(frozen.graph_def.node)}")
    print(f"size         {human_bytes(before)} -> {human_bytes(after)}")
    print(f"wrote        {args.dst}")
    return 0
