"""tfopt freeze SRC DST: variables to constants, written back with the same signature."""

from __future__ import annotations

from components.cli.call_deadline_flag import add_model_call_seconds_argument, apply_call_deadline
from components.cli.model_scan_flags import add_allow_op_argument, scan_policy
from components.cli.output import human_bytes


def add_parser(sub) -> None:
    p = sub.add_parser("freeze", help="freeze a SavedModel signature into a constant graph",
                       description="Freeze one signature of SRC (variables become constants, "
                                   "training-only nodes are dropped, control flow is kept) and "
                                   "write it to DST as a SavedModel with the same signature. "
                                   "The outputs are checked against SRC before DST is written.")
    p.add_argument("src", help="SavedModel directory")
    p.add_argument("dst", help="SavedModel directory to create")
    p.add_argument("--signature", default="serving_default", help="signature to freeze")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("--atol", type=float, default=1e-5,
                   help="largest absolute output difference accepted (default 1e-5)")
    add_allow_op_argument(p)
    add_model_call_seconds_argument(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from optimizer.errors import EquivalenceError
    from optimizer.files.atomic import check_writable
    from optimizer.model.export import write_saved_model
    from optimizer.model.freeze import freeze
    from optimizer.model.savedmodel import directory_size
    from optimizer.verify.equivalence import compare

    apply_call_deadline(args)  # before any model is called
    check_writable(args.dst, args.overwrite)
    policy = scan_policy(args)
    frozen = freeze(args.src, args.signature, policy=policy)
    report = compare(args.src, frozen, signature_name=args.signature, policy=policy)
    print(f"equivalence  {report.summary()}")
    if not report.within(atol=args.atol):
        raise EquivalenceError(
            f"frozen outputs differ from {args.src} by {report.max_abs_diff:.3g} "
            f"(> --atol {args.atol:g}); nothing written")
    write_saved_model(frozen, args.dst, overwrite=args.overwrite)
    before, after = directory_size(args.src), directory_size(args.dst)
    print(f"signature    {frozen.signature.describe()}")
    print(f"nodes        {len(frozen.graph_def.node)}")
    print(f"size         {human_bytes(before)} -> {human_bytes(after)}")
    print(f"wrote        {args.dst}")
    return 0
