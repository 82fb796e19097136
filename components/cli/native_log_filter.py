"""Keep TensorFlow's native INFO/WARNING chatter off the user's terminal.

TF 2.21 writes absl log lines (oneDNN notices, CPU feature hints, Grappler session starts) to
file descriptor 2 before absl logging is initialised, so ``TF_CPP_MIN_LOG_LEVEL`` cannot stop
them; LiteRT's interpreter announces its XNNPACK delegate the same way. The CLI routes fd 2
through a pipe and drops only those lines; errors (``E``/``F``, LiteRT's ``ERROR:``) and
everything Python prints pass through unchanged.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading

_NATIVE_NOISE = re.compile(
    rb"^(?:[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\]"
    rb"|WARNING: All log messages before absl::InitializeLog"
    rb"|To enable the following instructions:"
    rb"|INFO: Created TensorFlow Lite XNNPACK delegate)"
)


def install() -> None:
    if not hasattr(os, "pipe") or os.environ.get("TFOPT_NATIVE_LOGS"):
        return
    sys.stderr.flush()
    real_stderr = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        with os.fdopen(read_end, "rb", buffering=0) as source:
            pending = b""
            while chunk := source.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not _NATIVE_NOISE.match(line):
                        os.write(real_stderr, line + b"\n")
            if pending and not _NATIVE_NOISE.match(pending):
                os.write(real_stderr, pending)

    thread = threading.Thread(target=pump, name="native-log-filter", daemon=True)
    thread.start()

    def restore() -> None:
        sys.stderr.flush()
        os.dup2(real_stderr, 2)  # closes the pipe's last write end, so the pump sees EOF
        thread.join(timeout=2)

    atexit.register(restore)
    _installed.append(restore)


_installed: list = []


def drain() -> None:
    """Pass on what is in the pipe now and stop filtering: for a process about to end without
    running its exit handlers (a model call past its deadline, ``os._exit``)."""
    while _installed:
        _installed.pop()()
