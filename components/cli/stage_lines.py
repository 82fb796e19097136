"""What a command is doing, on stderr, so that no command is silent for more than a few seconds.

One line per stage when it ends, with its wall time (``[tfopt] optimize 12.3 s``). A stage still
running after :data:`FIRST_NOTICE` seconds says so (``[tfopt] benchmark ...``: the first such
line comes before TensorFlow, seconds to import, has loaded), and again every
:data:`HEARTBEAT` seconds with the time so far. A stage that fails prints no end line: the
error's own line follows. ``-q`` silences them all; ``-v`` adds the logging lines.

The prefix sets them apart from the error line (``tfopt: error: ...``), the one line a failure
prints of its own, and from stdout, where ``--json`` prints its one document.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

PREFIX = "[tfopt] "
# Quick stages (argument checks, a small model's read) end before saying anything but their
# end line; a failure there prints only its error line.
FIRST_NOTICE = 1.0
HEARTBEAT = 10.0


class StageLines:
    """Stage lines for one command; ``enabled`` False (``-q``) prints nothing."""

    def __init__(self, enabled: bool = True, stream=None):
        self.enabled = enabled
        self._stream = stream
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        """One line, now: a stage's own progress (the benchmark's rounds, the tuning's)."""
        if self.enabled:
            stream = self._stream or sys.stderr
            with self._lock:
                stream.write(f"{PREFIX}{message}\n")
                stream.flush()

    @contextmanager
    def stage(self, name: str, announce: bool = False) -> Iterator[None]:
        """Around one stage; ``announce``: say so at once, not after :data:`FIRST_NOTICE`."""
        started = time.perf_counter()
        done = threading.Event()
        if announce:
            self.say(f"{name} ...")

        def heartbeat() -> None:
            wait = HEARTBEAT if announce else FIRST_NOTICE
            while not done.wait(wait):
                elapsed = time.perf_counter() - started
                self.say(f"{name} ..." if wait == FIRST_NOTICE else f"{name} ... {elapsed:.0f} s")
                wait = HEARTBEAT

        ticker = threading.Thread(target=heartbeat, name=f"stage-{name}", daemon=True)
        if self.enabled:
            ticker.start()
        try:
            yield
        finally:
            done.set()
            if self.enabled:
                ticker.join()
        self.say(f"{name} {time.perf_counter() - started:.1f} s")


QUIET = StageLines(enabled=False)


def stages_of(args) -> StageLines:
    """The command's stage lines (``main`` sets them from ``-q``); silent for a caller that
    built its own arguments."""
    return getattr(args, "stages", QUIET)


def load_tensorflow(stages: StageLines) -> None:
    """Import TensorFlow (seconds, more on a busy machine) as a stage of its own, announced
    before it starts; nothing when this process has it already."""
    if "tensorflow" in sys.modules:
        return
    from tfopt.optimizer.tf_runtime import import_tensorflow

    with stages.stage("loading TensorFlow", announce=True):
        import_tensorflow()
