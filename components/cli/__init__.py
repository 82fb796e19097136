"""``tfopt``: the command line. One module per command; each defines ``add_parser`` and ``run``.

Errors the user can fix (a missing path, a corrupt model, an unknown name) are printed as one
line with their exit code; an unexpected failure prints one line too and keeps the traceback for
``TFOPT_DEBUG=1``.

Exit codes: 0 success; 1 internal error; 2 bad input; 3 the gate rejected the candidate;
4 a candidate's outputs diverge beyond tolerance (nothing written); 5 the model holds an op that
could touch files, the network or Python (refused before loading); 6 the registry's champion
cannot be used (unknown format, runtime not installed, corrupt artifact); 7 the work would not
fit the memory budget; 8 TF Serving cannot load the chosen model; 9 a model call did not return
within its deadline (the process was stopped, nothing published); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from components.cli import native_log_filter

# Command name -> module under components.cli. Adding a command: a module and a line here.
COMMANDS = {
    "inspect": "inspect_command",
    "freeze": "freeze_command",
    "benchmark": "benchmark_command",
    "gate": "gate_command",
    "optimize": "optimize_command",
    "run": "run_command",
    "step": "step_command",
}

EXIT_INTERNAL_ERROR = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfopt",
        description="Make a trained TensorFlow SavedModel faster, with the evidence to trust it.",
        epilog="Exit codes: 0 ok, 1 internal error, 2 bad input, 3 gate rejected, "
               "4 outputs diverge (nothing written), 5 model refused by the op scan, "
               "6 the registry's champion cannot be used, 7 over the memory budget, "
               "8 not servable by TF Serving, 9 a model call passed its deadline. "
               "TFOPT_DEBUG=1 shows tracebacks.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more progress output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMANDS.values():
        module = importlib.import_module(f"components.cli.{module_name}")
        module.add_parser(sub)
    return parser


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 \
        else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from optimizer.errors import TfoptError
    from optimizer.runtime.call_deadline import report_as

    args = build_parser().parse_args(argv)
    # a model call past its deadline ends this process, exit 9, in one line like any error
    report_as("tfopt: error: ", native_log_filter.drain)
    _configure_logging(args.verbose)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return int(args.run(args) or 0)
    except TfoptError as exc:
        print(f"tfopt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tfopt: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("TFOPT_DEBUG"):
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"tfopt: internal error: {type(exc).__name__}: {message} "
              f"(rerun with TFOPT_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


def entry_point() -> None:
    if "-vv" not in sys.argv[1:]:
        native_log_filter.install()
    sys.exit(main())
