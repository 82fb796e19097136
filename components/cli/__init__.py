"""``tfopt``: the command line. One module per command; each defines ``add_parser`` and ``run``.

Errors the user can fix (a missing path, a corrupt model, an unknown name) are printed as one
line with their exit code (:data:`tfopt.optimizer.errors.EXIT_CODES`, listed by ``tfopt --help``); an
unexpected failure prints one line too and keeps the traceback for ``TFOPT_DEBUG=1``.

Every command takes ``-v``/``-q`` before or after its name, and ``--json`` for one JSON document
on stdout. Progress goes to stderr: one line per stage (:mod:`tfopt.components.cli.stage_lines`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from tfopt.components.cli import native_log_filter
from tfopt.components.cli.stage_lines import StageLines

# Command name -> module under tfopt.components.cli. Adding a command: a module and a line here.
COMMANDS = {
    "inspect": "inspect_command",
    "freeze": "freeze_command",
    "benchmark": "benchmark_command",
    "gate": "gate_command",
    "optimize": "optimize_command",
    "run": "run_command",
    "step": "step_command",
    "config": "config_command",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tfopt")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _output_flags(suppress: bool) -> argparse.ArgumentParser:
    """``-v``/``-q``, for the main parser and, as a parent, every command's: they work on
    either side of the command's name. A command's copy defaults to SUPPRESS, so that it does
    not overwrite what was given before the name."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("output")
    group.add_argument("-v", "--verbose", action="count",
                       default=argparse.SUPPRESS if suppress else 0,
                       help="logging lines too (-vv for debug)")
    group.add_argument("-q", "--quiet", action="store_true",
                       default=argparse.SUPPRESS if suppress else False,
                       help="no stage lines on stderr: only results and errors")
    return parent


class _CommandsWithOutputFlags:
    """The subparsers, handing each command's parser ``-v``/``-q`` as a parent."""

    def __init__(self, sub, parent: argparse.ArgumentParser):
        self._sub, self._parent = sub, parent

    def add_parser(self, name: str, **keywords):
        keywords["parents"] = [*keywords.get("parents", ()), self._parent]
        return self._sub.add_parser(name, **keywords)


def build_parser() -> argparse.ArgumentParser:
    from tfopt.optimizer.errors import exit_codes_text

    parser = argparse.ArgumentParser(
        prog="tfopt", parents=[_output_flags(suppress=False)],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Make a trained TensorFlow SavedModel faster, with the evidence to trust it.",
        epilog=f"exit codes:\n{exit_codes_text()}\n\nTFOPT_DEBUG=1 shows tracebacks.",
    )
    parser.add_argument("--version", action="version", version=f"tfopt {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands = _CommandsWithOutputFlags(sub, _output_flags(suppress=True))
    for module_name in COMMANDS.values():
        module = importlib.import_module(f"tfopt.components.cli.{module_name}")
        module.add_parser(commands)
    return parser


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 \
        else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from tfopt.optimizer.errors import EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED, TfoptError
    from tfopt.optimizer.runtime.call_deadline import report_as

    args = build_parser().parse_args(argv)
    # a model call past its deadline ends this process, exit 9, in one line like any error
    report_as("tfopt: error: ", native_log_filter.drain)
    _configure_logging(args.verbose)
    args.stages = StageLines(enabled=not args.quiet)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return int(args.run(args) or 0)
    except TfoptError as exc:
        print(f"tfopt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tfopt: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
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
