"""Every model call under a deadline: a call past it stops its process, exit 9.

A model's call runs in its runtime's native code (TensorFlow's executor, LiteRT's interpreter,
ONNX Runtime, OpenVINO), which Python cannot interrupt: a ``tf.while_loop`` whose condition
never turns false never gives the thread back. So the deadline is kept by a watchdog thread,
and a call past it ends the process that made it, the only thing that stops it: the watchdog
writes one line to stderr and exits with :class:`~tfopt.optimizer.errors.ModelCallTimeoutError`'s
code (``os._exit``: the stuck call holds the interpreter's frames, nothing can unwind them).
A worker that ends so is reported by its parent as that error
(:mod:`tfopt.optimizer.system.worker_process`), so a run ends with one line and exit 9 whichever
process the call was in, and no later step (publish) runs.

How long a call may take (:class:`CallDeadline`): ``min_seconds`` (the config's
``resources.model_call_seconds``), or ``first_call_multiple`` times the model's own first
call, whichever is longer; a first call has ``min_seconds``. A real model's first call pays
for its tracing and compilation, so no later call of it nears 60 times that; a slow real
model (seconds a call) gets minutes. The deadline in force is this process's
(:func:`configure`, which the pipeline's steps and the CLI call), inherited by the workers it
starts through the environment variable :data:`ENV`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from pydantic import Field

from tfopt.optimizer.errors import InvalidInputsError, ModelCallTimeoutError
from tfopt.optimizer.records import Settings

# Carries this process's deadline to the workers it starts (child_environment copies it).
ENV = "TFOPT_MODEL_CALL_DEADLINE"


class CallDeadline(Settings):
    """How long a model call may run before its process is stopped; a bad value is exit 2."""

    error = InvalidInputsError
    subject = "model call deadline"

    min_seconds: float = Field(
        300.0, gt=0, description="seconds a model call may take at least before it is "
                                 "stopped (exit 9): each call's deadline is this or "
                                 "first_call_multiple times the model's first call, whichever "
                                 "is longer")
    first_call_multiple: float = Field(
        60.0, gt=0, description="a call may take this many times its model's first call "
                                "(when that is longer than min_seconds)")

    def seconds(self, first_call: float | None) -> float:
        """The deadline of a call of a model whose first call took ``first_call`` seconds
        (None: this is its first call)."""
        if first_call is None:
            return self.min_seconds
        return max(self.min_seconds, self.first_call_multiple * first_call)


_configured: CallDeadline | None = None


def configure(deadline: CallDeadline) -> None:
    """The deadline of this process's model calls, and of the workers it starts from now."""
    global _configured
    _configured = deadline
    os.environ[ENV] = deadline.model_dump_json()


def current() -> CallDeadline:
    """This process's deadline: configured, else its parent's (:data:`ENV`), else the
    defaults."""
    global _configured
    if _configured is None:
        inherited = os.environ.get(ENV)
        _configured = (CallDeadline.model_validate_json(inherited) if inherited
                       else CallDeadline())
    return _configured


_report = {"prefix": "", "before_exit": None}


def report_as(prefix: str, before_exit: Callable[[], None] | None = None) -> None:
    """What this process writes before the line when a call passes its deadline: the CLI's
    ``tfopt: error: ``, so that it reads as its other errors; ``before_exit`` is called once
    the line is written (the CLI's stderr filter passes it on). A worker writes the bare line,
    which its parent reports (:mod:`tfopt.optimizer.system.worker_process`)."""
    _report.update(prefix=prefix, before_exit=before_exit)


class _Watchdog:
    """One daemon thread per process, waking at the earliest armed deadline."""

    def __init__(self):
        self._armed: dict[int, tuple[float, str]] = {}
        self._tokens = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, what: str) -> int:
        with self._wake:
            token = next(self._tokens)
            due = time.monotonic() + seconds
            # woken only when this deadline is the earliest: a call per batch costs no switch
            earliest = not self._armed or due < min(d for d, _ in self._armed.values())
            self._armed[token] = (due, what)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._watch, name="tfopt-call-deadline",
                                                daemon=True)
                self._thread.start()
            elif earliest:
                self._wake.notify()
            return token

    def disarm(self, token: int) -> None:
        with self._wake:
            self._armed.pop(token, None)

    def _watch(self) -> None:
        with self._wake:
            while True:
                if not self._armed:
                    self._wake.wait()
                    continue
                due, what = min(self._armed.values())
                remaining = due - time.monotonic()
                if remaining > 0:
                    self._wake.wait(remaining)
                    continue
                _stop(what)


_WATCHDOG = _Watchdog()


def _stop(what: str) -> None:
    """End this process: the call cannot be interrupted, and nothing after it may run."""
    try:
        sys.stderr.write(f"{_report['prefix']}{what}\n")
        sys.stderr.flush()
        if _report["before_exit"] is not None:
            _report["before_exit"]()
    finally:
        os._exit(ModelCallTimeoutError.exit_code)


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Run the block under a deadline of ``seconds``; ``what`` is the line written if it
    passes (say which model, which call and the deadline)."""
    token = _WATCHDOG.arm(seconds, what)
    try:
        yield
    finally:
        _WATCHDOG.disarm(token)


def past_deadline_line(description: str, seconds: float, calls: str = "a call") -> str:
    """The one line a call past its deadline ends the run with."""
    return (f"{calls} of {description} did not return within its deadline of {seconds:g}s "
            f"and was stopped (resources.model_call_seconds or --model-call-seconds set it; a "
            f"model that never returns, e.g. a loop whose condition never turns false, cannot "
            f"be optimized)")


class FirstCallClock:
    """The deadlines of one model's calls: its first call's, then a multiple of how long
    that took (:meth:`CallDeadline.seconds`)."""

    def __init__(self, description: str):
        self.description = description
        self.first_call: float | None = None

    def seconds(self) -> float:
        return current().seconds(self.first_call)

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """One call of the model under its deadline; the first one is timed."""
        seconds = self.seconds()
        started = time.perf_counter()
        with deadline(seconds, past_deadline_line(self.description, seconds)):
            yield
        if self.first_call is None:
            self.first_call = time.perf_counter() - started


def timing_deadline(clocks: Iterable[FirstCallClock], calls: int, extra_seconds: float,
                    what: str):
    """A deadline over a timing loop of bound calls (too quick a path for a deadline each):
    ``calls`` calls of each model at its own call deadline, plus ``extra_seconds`` the loop
    may go on for. Call each model once at these inputs under its own deadline first."""
    clocks = list(clocks)
    seconds = extra_seconds + calls * sum(clock.seconds() for clock in clocks)
    return deadline(seconds, past_deadline_line(what, seconds, f"timing {calls} calls each"))
