"""CPU threading for a benchmark: how many CPUs this process really has, and TF's thread pools.

``os.cpu_count()`` counts the node's CPUs, not this process's. A container limited to 2 CPUs on
a 64-core node that sizes its thread pools from it runs 64 threads on 2 CPUs' worth of quota;
the scheduler then throttles the whole cgroup every period, and published tuning write-ups
measured 5-10x slowdowns from exactly this. :func:`available_cpus` takes the smallest of

- the CPU affinity mask (``os.sched_getaffinity``: taskset, cpusets, Kubernetes static CPUs),
- the cgroup CPU quota: v2 ``cpu.max`` (``"200000 100000"`` = 2 CPUs, ``"max 100000"`` = no
  limit), v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota ``-1`` = no limit), read for
  this process's cgroup and its ancestors, since a parent's limit binds too. A fractional quota
  rounds down (1.5 CPUs -> 1 thread), never below 1.

:func:`apply_runtime_settings` must run before TensorFlow initialises its runtime (the first op or
model load): TF reads ``TF_ENABLE_ONEDNN_OPTS`` when it is imported and sizes its thread pools
once, at context creation. Afterwards nothing can change them; the settings are then recorded as
requested *and* as actually in effect, with ``settings_in_effect`` false, so a result never
claims settings it did not run with.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import computed_field

from tfopt.optimizer.records import JsonRecord
from tfopt.optimizer.system.cgroup import (
    CGROUP_ROOT,
    PROC_SELF_CGROUP,
    own_cgroup_paths,
    with_ancestors,
)

log = logging.getLogger(__name__)

_V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


@dataclass(frozen=True)
class CpuAvailability(JsonRecord):
    logical_cpus: int  # CPUs the kernel reports for the machine
    affinity_cpus: int | None  # CPUs this process may run on; None where unknown
    quota_cpus: float | None  # the cgroup quota in CPUs; None for no limit
    quota_source: str  # the file the binding quota came from, '' when none

    @computed_field  # written with the figures it comes from
    @property
    def available(self) -> int:
        limits = [self.logical_cpus]
        if self.affinity_cpus:
            limits.append(self.affinity_cpus)
        if self.quota_cpus is not None:
            limits.append(max(1, math.floor(self.quota_cpus)))
        return max(1, min(limits))


def _read_v2_quota(directory: Path) -> float | None:
    try:
        fields = (directory / "cpu.max").read_text().split()
    except OSError:
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _read_v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text().strip())
        period = int((directory / "cpu.cfs_period_us").read_text().strip())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_cpu_quota(root: Path = CGROUP_ROOT,
                     proc_cgroup: Path = PROC_SELF_CGROUP) -> tuple[float | None, str]:
    """``(CPUs allowed by the tightest cgroup quota, the file it came from)``; ``(None, '')``
    when no quota applies. Both cgroup v2 and v1 layouts under ``root`` are read."""
    own = own_cgroup_paths(proc_cgroup)
    candidates: list[tuple[float, str]] = []
    for directory in with_ancestors(root, own.get("", "/")):
        quota = _read_v2_quota(directory)
        if quota is not None:
            candidates.append((quota, str(directory / "cpu.max")))
    for name in _V1_CPU_DIRS:
        base = root / name
        if not base.is_dir():
            continue
        for directory in with_ancestors(base, own.get("cpu", "/")):
            quota = _read_v1_quota(directory)
            if quota is not None:
                candidates.append((quota, str(directory / "cpu.cfs_quota_us")))
    if not candidates:
        return None, ""
    return min(candidates)


def available_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_SELF_CGROUP,
                   affinity: set[int] | frozenset[int] | None = None,
                   logical_cpus: int | None = None) -> CpuAvailability:
    """The CPUs this process can really use; every source is injectable for tests."""
    if affinity is None and hasattr(os, "sched_getaffinity"):
        affinity = os.sched_getaffinity(0)
    quota, source = cgroup_cpu_quota(root, proc_cgroup)
    return CpuAvailability(
        logical_cpus=logical_cpus or os.cpu_count() or 1,
        affinity_cpus=len(affinity) if affinity else None,
        quota_cpus=quota,
        quota_source=source,
    )


@dataclass(frozen=True)
class RuntimeSettings(JsonRecord):
    """What the benchmark asks of TF and its OpenMP/oneDNN runtime.

    ``onednn``: ``TF_ENABLE_ONEDNN_OPTS`` (None leaves the environment's choice; TF's default on
    x86 Linux is on). ``kmp_*`` are Intel OpenMP knobs, set only when given.
    """

    intra_op_threads: int
    inter_op_threads: int
    omp_num_threads: int
    kmp_blocktime: int | None = None
    kmp_affinity: str | None = None
    onednn: bool | None = None

    def env_vars(self) -> dict[str, str]:
        env = {"OMP_NUM_THREADS": str(self.omp_num_threads)}
        if self.kmp_blocktime is not None:
            env["KMP_BLOCKTIME"] = str(self.kmp_blocktime)
        if self.kmp_affinity is not None:
            env["KMP_AFFINITY"] = self.kmp_affinity
        if self.onednn is not None:
            env["TF_ENABLE_ONEDNN_OPTS"] = "1" if self.onednn else "0"
        return env


def default_runtime_settings(threads: int | None = None, cpus: CpuAvailability | None = None,
                             inter_op_threads: int = 1, onednn: bool | None = None,
                             kmp_blocktime: int | None = None,
                             kmp_affinity: str | None = None) -> RuntimeSettings:
    """Intra-op threads = ``threads`` or the CPUs really available; one inter-op thread, the
    usual choice for latency on one socket (ops run one after another, each on all threads)."""
    intra = threads or (cpus or available_cpus()).available
    return RuntimeSettings(intra_op_threads=intra, inter_op_threads=inter_op_threads,
                           omp_num_threads=intra, kmp_blocktime=kmp_blocktime,
                           kmp_affinity=kmp_affinity, onednn=onednn)


@dataclass(frozen=True)
class AppliedRuntime(JsonRecord):
    """The settings asked for and the ones in effect (TF reports 0 for "its default")."""

    requested: RuntimeSettings
    intra_op_threads: int
    inter_op_threads: int
    onednn_enabled: bool | None
    env: dict[str, str | None]
    settings_in_effect: bool
    cpus: CpuAvailability
    notes: tuple[str, ...] = field(default=())


RECORDED_ENV = ("OMP_NUM_THREADS", "KMP_BLOCKTIME", "KMP_AFFINITY", "TF_ENABLE_ONEDNN_OPTS")


def _onednn_enabled() -> bool | None:
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    return bool(_pywrap_util_port.IsMklEnabled())


def export_env(settings: RuntimeSettings) -> list[str]:
    """Set the settings' env vars now; call it before anything imports TensorFlow (TF reads
    ``TF_ENABLE_ONEDNN_OPTS`` at import). Returns notes on settings that came too late."""
    notes = []
    tf_was_imported = "tensorflow" in sys.modules
    for key, value in settings.env_vars().items():
        if key == "TF_ENABLE_ONEDNN_OPTS" and tf_was_imported and os.environ.get(key) != value:
            notes.append(f"TF_ENABLE_ONEDNN_OPTS={value} requested after TensorFlow was "
                         f"imported; it has no effect in this process")
        os.environ[key] = value
    return notes


def settings_take_effect_here(settings: RuntimeSettings) -> bool:
    """Whether :func:`apply_runtime_settings` can still give this process ``settings``: TF not
    yet imported, or its pools not yet sized (or sized as asked) and oneDNN as asked. When not
    (a step after others that ran models in this process), they take effect only in a process
    started with them (:mod:`tfopt.optimizer.system.worker_process`). Warns of nothing."""
    if "tensorflow" not in sys.modules:
        return True
    from tfopt.optimizer.tf_runtime import import_tensorflow

    threading = import_tensorflow().config.threading
    try:  # a setter given the value in force returns; once the pools exist, another raises
        threading.set_intra_op_parallelism_threads(settings.intra_op_threads)
        threading.set_inter_op_parallelism_threads(settings.inter_op_threads)
    except RuntimeError:
        return False
    onednn = _onednn_enabled()
    return settings.onednn is None or onednn is None or onednn == settings.onednn


def apply_runtime_settings(settings: RuntimeSettings,
                           cpus: CpuAvailability | None = None) -> AppliedRuntime:
    """Export the env vars, then size TF's thread pools; record what is actually in effect."""
    notes = export_env(settings)

    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    threading = tf.config.threading
    for setter, value in ((threading.set_intra_op_parallelism_threads, settings.intra_op_threads),
                          (threading.set_inter_op_parallelism_threads, settings.inter_op_threads)):
        try:
            setter(value)
        except RuntimeError:  # the context exists already: its pools are sized for good
            pass
    intra = threading.get_intra_op_parallelism_threads()
    inter = threading.get_inter_op_parallelism_threads()
    threads_in_effect = (intra, inter) == (settings.intra_op_threads, settings.inter_op_threads)
    if not threads_in_effect:
        notes.append(f"TensorFlow was initialised before the settings were applied: running with "
                     f"intra_op={intra}, inter_op={inter} (0 = TF's default, all CPUs)")
    onednn = _onednn_enabled()
    onednn_in_effect = settings.onednn is None or onednn is None or onednn == settings.onednn
    for note in notes:
        log.warning("%s", note)
    return AppliedRuntime(
        requested=settings, intra_op_threads=intra, inter_op_threads=inter,
        onednn_enabled=onednn, env={k: os.environ.get(k) for k in RECORDED_ENV},
        settings_in_effect=threads_in_effect and onednn_in_effect,
        cpus=cpus or available_cpus(), notes=tuple(notes))
