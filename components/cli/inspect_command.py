"""tfopt inspect SRC: signatures, op histogram, size on disk, variable count."""

from __future__ import annotations

import json

from tfopt.components.cli.model_scan_flags import add_allow_op_argument, scan_policy
from tfopt.components.cli.output import human_bytes, op_histogram_table


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="describe a SavedModel without running it",
                       description="Describe a SavedModel: its signatures (input/output keys, "
                                   "dtypes, shapes), op histogram, size on disk and variables.")
    p.add_argument("src", help="SavedModel directory")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--top", type=int, default=25, help="ops to list in the histogram")
    add_allow_op_argument(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from tfopt.optimizer.errors import shown
    from tfopt.optimizer.model.savedmodel import describe

    info = describe(args.src, policy=scan_policy(args))
    if args.json:
        print(json.dumps(info.to_dict(), indent=2))
        return 0
    # Names, tags and versions are the model's own text: a newline or an escape sequence in
    # one is shown escaped, never sent to the terminal (shown()).
    print(f"SavedModel   {shown(info.path)}")
    print(f"tags         {shown(', '.join(info.tags)) or '-'}")
    print(f"size         {human_bytes(info.size_bytes)} ({info.size_bytes} bytes)")
    print(f"variables    {info.variable_count}")
    print(f"TF version   {shown(info.tf_version) or 'unknown'}")
    print("signatures")
    for sig in info.signatures.values():
        print(f"  {shown(sig.describe())}")
    print(f"ops ({sum(info.op_counts.values())} nodes incl. functions)")
    counts = {shown(op): count for op, count in info.op_counts.items()}
    print(op_histogram_table(counts, top=args.top))
    return 0
