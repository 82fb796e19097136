"""``--allow-op OP``: lift the model scan's refusal of an op type for one command.

Every command that reads a model scans it first (:mod:`tfopt.optimizer.model.op_scan`); a model that needs
one of the refused ops, and whose source is trusted, passes with ``--allow-op`` for each op. The
command passes :func:`scan_policy` to every function that reads a model.
"""

from __future__ import annotations


def add_allow_op_argument(parser) -> None:
    parser.add_argument("--allow-op", dest="allow_ops", action="append", default=[],
                        metavar="OP", help="accept models holding this op type, which the "
                                           "model scan refuses (file, network or Python "
                                           "access); repeatable")


def scan_policy(args):
    """The model scan's policy that ``args`` (``--allow-op``) asks for."""
    from tfopt.optimizer.model.op_scan import ScanPolicy

    return ScanPolicy.create(args.allow_ops)
