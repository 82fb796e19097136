"""Argument checks shared by the runtime-tuning modules, and their error."""

from __future__ import annotations

from tfopt.optimizer.errors import TfoptError


class RuntimeTuningError(TfoptError):
    """A bad tuning setting (0 threads, a non-positive target) or a probe that failed."""


def positive(name: str, value, kind=int):
    """``value`` unchanged if None or positive (an int when ``kind`` is int); else an error."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (kind is int and not isinstance(value, int)) or value <= 0:
        what = "a positive integer" if kind is int else "a positive number"
        raise RuntimeTuningError(f"{name} must be {what}, got {value!r}")
    return value


def check_min_gain(min_gain: float) -> None:
    if isinstance(min_gain, bool) or not isinstance(min_gain, (int, float)) or \
            not 0 <= min_gain < 1:
        raise RuntimeTuningError(f"min_gain must be in [0, 1), got {min_gain!r}")


class ProbeStopped(RuntimeTuningError):
    """A probe the memory watchdog killed: the tree crossed the budget while it ran.
    ``reason``: "stopped at X GiB, over the memory budget of Y GiB (source)"."""

    def __init__(self, probe: str, reason: str):
        super().__init__(f"{probe} {reason}")
        self.reason = reason
