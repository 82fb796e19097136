"""Keep a converter's own output off the terminal, and keep it for its error messages.

TensorFlow's converters, tf2onnx and OpenVINO's frontend write pages of native log lines,
MLIR diagnostics and Python logging to file descriptor 2 while they run.
:func:`captured_native_output` sends fd 2 to a temporary file for the duration of a block and
hands the text back, so that a converter module can log it at DEBUG and pick the line that says
why a conversion failed. ``TFOPT_NATIVE_LOGS=1`` lets the output through untouched, as for the
CLI.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def captured_native_output() -> Iterator[list[str]]:
    """Send fd 2 (native logs, MLIR diagnostics, Python's stderr) to a temp file while the
    block runs; the yielded list then holds the text."""
    captured: list[str] = []
    if os.environ.get("TFOPT_NATIVE_LOGS"):
        yield captured
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode("utf-8", errors="replace"))
