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
    return f"{where}: {named} {key!r}: {error['msg']} (got {error.get('input')!r})"


class TfoptError(Exception):
    """Bad input or an operation refused for a stated reason. ``exit_code`` is the CLI's."""

    exit_code = 2


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

    exit_code = 5


class UnknownSignatureError(TfoptError):
    pass


class DestinationError(TfoptError):
    """DST cannot be written: not writable, exists without overwrite, or a file where a dir goes."""


class InvalidInputsError(TfoptError):
    """Inputs supplied for a run do not match the signature."""


class ModelCallTimeoutError(TfoptError):
    """A model's call did not return within its deadline (optimizer/runtime/call_deadline.py):
    the process that made it was stopped, and the run ends without publishing."""

    exit_code = 9


class EquivalenceError(TfoptError):
    """A candidate's outputs diverge from the original's beyond the tolerance."""

    exit_code = 4


class GateConfigError(TfoptError):
    """A quality-gate config file is unreadable or holds an unknown key or a bad value."""


class BenchmarkResultError(TfoptError):
    """A benchmark RESULT.json is missing, not JSON, or not in the expected format."""
