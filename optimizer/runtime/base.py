"""What every runtime's runner offers, so the benchmark, equivalence check, evaluation and tuning
treat a SavedModel, a LiteRT flatbuffer or any other format alike.

``runner(feeds) -> outputs`` takes and returns ``{signature key: numpy array}``. ``call`` is the
hot path the benchmark times: it takes what ``to_tensors`` made once, so that converting numpy
arrays to the runtime's own tensors is not timed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tfopt.optimizer.errors import InvalidInputsError, TfoptError
from tfopt.optimizer.model.signature import SignatureInfo


class RuntimeUnavailableError(TfoptError):
    """The package a format's runtime needs is not installed."""


class UnknownFormatError(TfoptError):
    """A model format no runtime here runs."""


class CorruptModelError(TfoptError):
    """A model file its runtime cannot read."""


def default_threads() -> int:
    """The CPUs this process may really use (affinity and cgroup quota): a per-model runtime's
    thread count when none is given (:mod:`tfopt.optimizer.system.cpu_threads`)."""
    from tfopt.optimizer.system.cpu_threads import available_cpus

    return available_cpus().available


def thread_count(num_threads: int | None) -> int:
    """``num_threads`` checked to be at least 1, or :func:`default_threads` for None."""
    num_threads = default_threads() if num_threads is None else num_threads
    if num_threads < 1:
        raise InvalidInputsError(f"num_threads must be at least 1, got {num_threads}")
    return num_threads


class ModelRunner:
    """Calls one signature of one model.

    ``format`` and ``runtime`` say what runs it (see :mod:`tfopt.optimizer.runtime.registry`);
    ``num_threads`` is the runtime's own thread count for this model, or None where threads are
    the process's (TensorFlow sizes its pools once per process).
    """

    format = ""
    runtime = ""
    num_threads: int | None = None
    # its runtime's workers spin on after a call (ONNX Runtime with a pool): whoever times it
    # interleaved with other models waits for them (tfopt.optimizer.benchmark.idle)
    spins_after_call = False

    def __init__(self, signature: SignatureInfo, fn, by_keyword: bool, description: str):
        self.signature = signature
        self._fn = fn
        self._by_keyword = by_keyword
        self.description = description

    def check_feeds(self, feeds: Mapping[str, np.ndarray]) -> None:
        missing = [k for k in self.signature.input_keys if k not in feeds]
        if missing:
            raise InvalidInputsError(
                f"inputs missing for signature '{self.signature.name}': {', '.join(missing)}")

    def to_tensors(self, feeds: Mapping[str, np.ndarray]) -> list:
        """The runtime's inputs for ``feeds``, in signature order; numpy arrays by default."""
        self.check_feeds(feeds)
        return [np.asarray(feeds[s.key], dtype=s.numpy_dtype) for s in self.signature.inputs]

    def call(self, tensors: list):
        if self._by_keyword:
            return self._fn(**dict(zip(self.signature.input_keys, tensors)))
        return self._fn(*tensors)

    def bind(self, tensors: list):
        """``call`` with ``tensors`` bound: a callable of no arguments that goes straight to the
        runtime, as a serving loop with its inputs ready would. For a model that runs in a few
        microseconds (a LiteRT lookup model: 7 us), ``call``'s argument packing per call is a
        tenth of the time."""
        if type(self).call is not ModelRunner.call:  # a runtime with its own calling convention
            return lambda: self.call(tensors)
        fn = self._fn
        if self._by_keyword:
            keywords = dict(zip(self.signature.input_keys, tensors))
            return lambda: fn(**keywords)
        positional = tuple(tensors)
        return lambda: fn(*positional)

    def outputs(self, raw) -> dict[str, np.ndarray]:
        """What ``call`` returned, as ``{output key: numpy array}``."""
        return {k: np.asarray(v) for k, v in raw.items()}

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs for ``feeds``, the call under its deadline: one that never returns
        stops this process, exit 9 (:mod:`tfopt.optimizer.runtime.call_deadline`)."""
        with self.deadline_clock().call():
            return self.outputs(self.call(self.to_tensors(feeds)))

    def deadline_clock(self):
        """This model's :class:`~tfopt.optimizer.runtime.call_deadline.FirstCallClock`."""
        from tfopt.optimizer.runtime.call_deadline import FirstCallClock

        clock = self.__dict__.get("_deadline_clock")
        if clock is None:
            name = getattr(self, "description", "") or type(self).__name__
            clock = self.__dict__["_deadline_clock"] = FirstCallClock(name)
        return clock

    def close(self) -> None:
        """Drop the runtime's hold on the model; the runner is unusable afterwards."""
        self._fn = None

