"""Where a benchmark ran: the fingerprint recorded with every result.

Latency numbers mean nothing without the machine behind them: the same graph runs at different
speeds with and without AVX-512/VNNI/AMX, with oneDNN on or off, with 2 or 64 threads. A result
carries the CPU model and its relevant instruction sets, the CPUs really available (affinity
and cgroup quota), the TF and tfopt versions, the thread settings in effect, and a digest of
each model directory, so that two results can be compared only when they are comparable.
"""

from __future__ import annotations

import hashlib
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.records import JsonRecord
from tfopt.optimizer.system.cpu_features import cpu_model, isa_support
from tfopt.optimizer.system.cpu_threads import AppliedRuntime

_CHUNK = 1 << 20


def model_digest(path: str | os.PathLike, files: Sequence[Path] | None = None) -> str:
    """``sha256:<hex>`` over every file under ``path``: relative path, size and bytes, in sorted
    path order, so it names the directory's content whatever the filesystem's listing order.
    ``files`` (beside a model file ``path``: it and its companions, such as an OpenVINO IR's
    ``.bin``) replaces the listing."""
    root = Path(path)
    base = root.parent if root.is_file() else root
    if files is None:
        files = [root] if root.is_file() else sorted(
            (p for p in root.rglob("*") if p.is_file()),
            key=lambda p: p.relative_to(root).as_posix())
    digest = hashlib.sha256()
    for file in files:
        relative = Path(file).relative_to(base).as_posix()
        digest.update(relative.encode() + b"\0" + str(file.stat().st_size).encode() + b"\0")
        with open(file, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def project_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tfopt")
    except PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class Environment(JsonRecord):
    cpu_model: str
    isa: dict[str, bool]
    tensorflow_version: str
    tfopt_version: str
    python_version: str
    platform: str
    runtime: AppliedRuntime  # threads, oneDNN, OMP/KMP env and the CPUs available

    def summary(self) -> str:
        cpus = self.runtime.cpus
        quota = "none" if cpus.quota_cpus is None else f"{cpus.quota_cpus:g} CPUs"
        isa = ", ".join(name for name, present in self.isa.items() if present) or "none"
        onednn = {True: "on", False: "off", None: "unknown"}[self.runtime.onednn_enabled]
        return (f"{self.cpu_model or 'unknown CPU'} ({isa}); {cpus.available} of "
                f"{cpus.logical_cpus} CPUs available (cgroup quota {quota}); TF "
                f"{self.tensorflow_version}, oneDNN {onednn}, intra_op "
                f"{self.runtime.intra_op_threads}, inter_op {self.runtime.inter_op_threads}; "
                f"tfopt {self.tfopt_version}")


def capture_environment(runtime: AppliedRuntime) -> Environment:
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    return Environment(
        cpu_model=cpu_model(), isa=isa_support(), tensorflow_version=tf.__version__,
        tfopt_version=project_version(), python_version=platform.python_version(),
        platform=platform.platform(), runtime=runtime)
