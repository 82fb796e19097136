"""``--model-call-seconds SECONDS``: the deadline of every model call of a command that runs
models (:mod:`tfopt.optimizer.runtime.call_deadline`): a call past it, or past the multiple of its
model's first call when that is longer, stops the command with one line, exit 9. The pipeline
reads the same setting from ``resources.model_call_seconds``."""

from __future__ import annotations

from tfopt.optimizer.records import default_of
from tfopt.optimizer.runtime.call_deadline import CallDeadline


def add_model_call_seconds_argument(parser) -> None:
    multiple = default_of(CallDeadline, "first_call_multiple")
    parser.add_argument("--model-call-seconds", type=float, dest="model_call_seconds",
                        default=default_of(CallDeadline, "min_seconds"), metavar="SECONDS",
                        help=f"a model call may take this long, or {multiple:g}x its model's "
                             f"first call if longer, before it is stopped (exit 9; default "
                             f"%(default)gs)")


def apply_call_deadline(args) -> None:
    """This command's deadline (and its workers'), from ``--model-call-seconds``."""
    from tfopt.optimizer.errors import InvalidInputsError
    from tfopt.optimizer.runtime.call_deadline import configure

    if not args.model_call_seconds > 0:
        raise InvalidInputsError(
            f"--model-call-seconds must be positive, got {args.model_call_seconds:g}")
    configure(CallDeadline(min_seconds=args.model_call_seconds))
