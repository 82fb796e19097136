"""Typed errors for bad input. The CLI turns each into one line and its exit code.

Anything that is the caller's fault (a missing path, a corrupt file, an unknown name) raises a
subclass of :class:`TfoptError`; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


def shown(text: object) -> str:
    """User text for an error message: non-printable characters escaped, so that the message
    stays one line (a key read from YAML may hold a newline or a carriage return)."""
    text = str(text)
    return text if text.isprintable() else "".join(
        c if c.isprintable() else repr(c)[1:-1] for c in text)


def first_line(exc: BaseException, with_type: bool = False) -> str:
    """An exception as one line: its message's first line, or its type's name when it has none
    (TensorFlow's errors carry pages of context after the line that says what went wrong).
    ``with_type``: ``"<type>: <first line>"``, for a report where exceptions of any kind meet."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if with_type else text.splitlines()[0]


def validation_error_line(exc, where: str, section: str = "", allowed: Iterable[str] = ()) -> str:
    """The first problem a pydantic ``ValidationError`` lists, as one line naming its key: the
    config and the gate config both speak of a bad key this way. ``section`` names the mapping
    checked (``"gate config"``) in the line; ``allowed`` lists the valid keys after an unknown
    one."""
    error = exc.errors()[0]
    key = ".".join(str(p) for p in error["loc"]) or "(top level)"
    within = f" in {section}" if section else ""
    if error["type"] == "extra_forbidden":
        listed = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"{where}: unknown key {key!r}{within}{listed}"
    if error["type"] == "missing":
        return f"{where}: missing required key {key!r}{within}"
    named = f"{section} key" if section else "key"
    return f"{where}: {named} {key!r}: {error['msg']} (got {_shortened(repr(error.get('input')))})"


def _shortened(text: str, most: int = 200) -> str:
    """A bad value as the error line quotes it: a value of any size stays one short line."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"


# The CLI's exit codes, the one table: every error's ``exit_code`` is one of these, and
# ``tfopt --help`` and the docs list them from here (tests/test_cli_output.py checks both).
EXIT_OK = 0
EXIT_INTERNAL_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_GATE_REJECTED = 3
EXIT_DIVERGED = 4
EXIT_REFUSED_OP = 5
EXIT_CHAMPION_UNUSABLE = 6
EXIT_OVER_MEMORY_BUDGET = 7
EXIT_NOT_SERVABLE = 8
EXIT_CALL_TIMED_OUT = 9
EXIT_INTERRUPTED = 130

EXIT_CODES = {
    EXIT_OK: "success (gate, run, optimize --targets: a candidate is promoted)",
    EXIT_INTERNAL_ERROR: "internal error, a bug (TFOPT_DEBUG=1 shows the traceback)",
    EXIT_BAD_INPUT: "bad input: a missing path, not a SavedModel, an unknown name or key, a "
                    "bad value, DST not writable",
    EXIT_GATE_REJECTED: "the quality gate rejected every candidate",
    EXIT_DIVERGED: "outputs diverge beyond the tolerance, or a candidate cannot be built; "
                   "nothing written",
    EXIT_REFUSED_OP: "the model holds an op that could touch files, the network or Python: "
                     "refused before loading",
    EXIT_CHAMPION_UNUSABLE: "the registry's champion cannot be used (unknown format, runtime "
                            "not installed, corrupt artifact)",
    EXIT_OVER_MEMORY_BUDGET: "the model would not fit in the memory budget: refused before "
                             "any work",
    EXIT_NOT_SERVABLE: "a SavedModel does not load through TF Serving's loader; nothing "
                       "published",
    EXIT_CALL_TIMED_OUT: "a model call did not return within its deadline: the process was "
                         "stopped, nothing published",
    EXIT_INTERRUPTED: "interrupted",
}


def exit_codes_text() -> str:
    """The table as lines ``  N  meaning``, for ``--help``."""
    return "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES.items())


class TfoptError(Exception):
    """Bad input or an operation refused for a stated reason. ``exit_code`` is the CLI's, one
    of :data:`EXIT_CODES`."""

    exit_code = EXIT_BAD_INPUT


class SourceNotFoundError(TfoptError):
    pass


class NotASavedModelError(TfoptError):
    pass


class CorruptSavedModelError(TfoptError):
    pass


class OversizedSavedModelError(CorruptSavedModelError):
    """saved_model.pb is larger, or would take more memory to parse, than the limits allow."""


class DangerousOpError(TfoptError):
    """The model holds an op that could touch files, the network or Python: refused unread."""

    exit_code = EXIT_REFUSED_OP


class UnknownSignatureError(TfoptError):
    pass


class DestinationError(TfoptError):
    """DST cannot be written: not writable, exists without overwrite, or a file where a dir goes."""


class InvalidInputsError(TfoptError):
    """Inputs supplied for a run do not match the signature."""


class ModelCallTimeoutError(TfoptError):
    """A model's call did not return within its deadline (optimizer/runtime/call_deadline.py):
    the process that made it was stopped, and the run ends without publishing."""

    exit_code = EXIT_CALL_TIMED_OUT


class EquivalenceError(TfoptError):
    """A candidate's outputs diverge from the original's beyond the tolerance."""

    exit_code = EXIT_DIVERGED


class GateConfigError(TfoptError):
    """A quality-gate config file is unreadable or holds an unknown key or a bad value."""


class BenchmarkResultError(TfoptError):
    """A benchmark RESULT.json is missing, not JSON, or not in the expected format."""
