"""Thread settings: one setting, the default grid to search, the reference, serving env.

A TensorFlow model is tuned over its two thread pools (intra-op: threads one op may use;
inter-op: ops run at once); a model whose runtime takes a count per model (LiteRT, ONNX
Runtime, OpenVINO: :mod:`tfopt.optimizer.runtime.registry`) only over that ``num_threads``. The
grid is bounded by the CPUs this process may really use (affinity and cgroup quota,
:func:`tfopt.optimizer.system.cpu_threads.available_cpus`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from tfopt.optimizer.records import JsonRecord
from tfopt.optimizer.runtime_tuning.checks import RuntimeTuningError, positive


@dataclass(frozen=True)
class ThreadSetting(JsonRecord):
    """TensorFlow's two pool sizes, or a per-model runtime's ``num_threads`` (a LiteRT
    interpreter's); None = unset."""

    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    num_threads: int | None = None

    def __post_init__(self):
        for name in ("intra_op_threads", "inter_op_threads", "num_threads"):
            positive(name, getattr(self, name))
        if (self.intra_op_threads is None) != (self.inter_op_threads is None):
            raise RuntimeTuningError("give both intra_op_threads and inter_op_threads, or "
                                     "neither")
        if self.num_threads is None and self.intra_op_threads is None:
            raise RuntimeTuningError("a thread setting needs TensorFlow's intra/inter-op "
                                     "threads or LiteRT's num_threads")

    @property
    def label(self) -> str:
        parts = []
        if self.intra_op_threads is not None:
            parts.append(f"intra={self.intra_op_threads} inter={self.inter_op_threads}")
        if self.num_threads is not None:
            parts.append(f"num_threads={self.num_threads}")
        return " ".join(parts)

    @property
    def total_threads(self) -> int:
        return (self.intra_op_threads or 0) + (self.inter_op_threads or 0) + \
            (self.num_threads or 0)


def has_per_model_threads(model: str | os.PathLike) -> bool:
    """Whether the model's runtime takes a thread count per model (LiteRT, ONNX Runtime,
    OpenVINO): tuned over that instead of TensorFlow's two process-wide pools."""
    from tfopt.optimizer.runtime import detect_format, runtime_for

    return runtime_for(detect_format(model)).per_model_threads


def thread_grid(cpus: int, per_model: bool = False) -> list[ThreadSetting]:
    """The default settings to try on ``cpus`` CPUs (see the module docstring)."""
    positive("cpus", cpus)
    counts = sorted({n for n in (1, 2, cpus) if n <= cpus})
    if per_model:
        return [ThreadSetting(num_threads=n) for n in counts]
    return [ThreadSetting(intra, inter) for intra in counts for inter in (1, 2) if inter <= cpus]


def reference_setting(cpus: int, per_model: bool = False) -> ThreadSetting:
    """What runs without tuning: all CPUs for one op at a time (the benchmark's default)."""
    return ThreadSetting(num_threads=cpus) if per_model else ThreadSetting(cpus, 1)


def cpu_facts() -> tuple[int, float | None, str]:
    """``(CPUs available to this process, cgroup CPU quota or None, CPU model name)``."""
    from tfopt.optimizer.system.cpu_features import cpu_model
    from tfopt.optimizer.system.cpu_threads import available_cpus

    cpus = available_cpus()
    return cpus.available, cpus.quota_cpus, cpu_model()


def serving_env(setting: ThreadSetting) -> dict[str, str]:
    """Environment variables that give a TensorFlow server these thread pools."""
    if setting.intra_op_threads is None:
        return {}
    return {"TF_NUM_INTRAOP_THREADS": str(setting.intra_op_threads),
            "TF_NUM_INTEROP_THREADS": str(setting.inter_op_threads),
            "OMP_NUM_THREADS": str(setting.intra_op_threads)}


def validate_grid(grid: Sequence[ThreadSetting], reference: ThreadSetting, cpus: int,
                  per_model: bool) -> None:
    """Refuse a grid that cannot be searched on this model and machine, naming the setting."""
    if not grid:
        raise RuntimeTuningError("the thread grid is empty")
    for setting in grid:
        if per_model and setting.intra_op_threads is not None:
            raise RuntimeTuningError(f"[{setting.label}]: this model's runtime takes only "
                                     f"num_threads")
        if not per_model and setting.num_threads is not None:
            raise RuntimeTuningError(f"[{setting.label}]: num_threads is a LiteRT setting (a "
                                     "runtime's own thread count); a SavedModel takes "
                                     "intra_op_threads and inter_op_threads")
    if len(set(grid)) != len(grid):
        raise RuntimeTuningError("the thread grid lists a setting twice")
    if reference not in grid:
        raise RuntimeTuningError(f"the reference setting [{reference.label}] is not in the grid")
    too_many = [s.label for s in grid
                if max(s.intra_op_threads or 0, s.num_threads or 0) > cpus]
    if too_many:
        raise RuntimeTuningError(f"setting(s) {', '.join(too_many)} use more threads than the "
                                 f"{cpus} CPU(s) this process may use")
