"""How much memory this work may use: the cgroup's limit, else the configured budget.

A pod is killed, without a word, the moment its cgroup's memory use crosses its limit. So the
budget is read from the limit when there is one (cgroup v2 ``memory.max``, v1
``memory.limit_in_bytes``; this cgroup's and its ancestors', the tightest binding), else from
``resources.memory_gb`` (``--memory-gb``), else the machine's memory (``MemTotal``). Work that
would not fit is refused or split before it starts, with the estimate and the budget in one
line (:class:`MemoryBudgetError`), never left to the OOM killer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.errors import EXIT_OVER_MEMORY_BUDGET, TfoptError
from tfopt.optimizer.system.cgroup import (
    CGROUP_ROOT,
    PROC_SELF_CGROUP,
    own_cgroup_paths,
    with_ancestors,
)

GIB = 2**30
PROC_MEMINFO = Path("/proc/meminfo")
# v1 reports "no limit" as a page-aligned huge number rather than "max".
_V1_UNLIMITED = 2**60


class MemoryBudgetError(TfoptError):
    """The work would not fit in the memory budget, even alone: refused before it starts."""

    exit_code = EXIT_OVER_MEMORY_BUDGET


@dataclass(frozen=True)
class MemoryBudget:
    bytes: int
    source: str  # the cgroup file, "resources.memory_gb", or "MemTotal"

    def describe(self) -> str:
        return f"{self.bytes / GIB:.1f} GiB ({self.source})"

    def require(self, estimate: int, what: str) -> None:
        """Refuse ``what`` when its ``estimate`` (bytes) exceeds the budget."""
        if estimate > self.bytes:
            raise MemoryBudgetError(
                f"{what} needs an estimated {estimate / GIB:.1f} GiB of memory, more than the "
                f"budget of {self.describe()}; give the task more memory (a higher pod "
                f"limit, or resources.memory_gb / --memory-gb where there is no limit)")


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < _V1_UNLIMITED else None


def cgroup_memory_limit(root: Path = CGROUP_ROOT,
                        proc_cgroup: Path = PROC_SELF_CGROUP) -> tuple[int | None, str]:
    """``(the tightest memory limit in bytes, the file it came from)``; ``(None, '')`` when
    no limit applies."""
    own = own_cgroup_paths(proc_cgroup)
    found: list[tuple[int, str]] = []
    for directory in with_ancestors(root, own.get("", "/")):
        limit = _read_limit(directory / "memory.max")
        if limit is not None:
            found.append((limit, str(directory / "memory.max")))
    v1 = root / "memory"
    if v1.is_dir():
        for directory in with_ancestors(v1, own.get("memory", "/")):
            limit = _read_limit(directory / "memory.limit_in_bytes")
            if limit is not None:
                found.append((limit, str(directory / "memory.limit_in_bytes")))
    return min(found) if found else (None, "")


def machine_memory(meminfo: Path = PROC_MEMINFO) -> int | None:
    try:
        match = re.search(r"^MemTotal:\s+(\d+) kB", meminfo.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def memory_budget(memory_gb: float | None = None, root: Path = CGROUP_ROOT,
                  proc_cgroup: Path = PROC_SELF_CGROUP,
                  meminfo: Path = PROC_MEMINFO) -> MemoryBudget:
    """The cgroup limit when there is one (a configured budget cannot exceed what the kernel
    enforces), else ``memory_gb``, else the machine's memory."""
    limit, source = cgroup_memory_limit(root, proc_cgroup)
    configured = int(memory_gb * GIB) if memory_gb is not None else None
    if limit is not None and (configured is None or limit <= configured):
        return MemoryBudget(limit, source)
    if configured is not None:
        return MemoryBudget(configured, "resources.memory_gb")
    total = machine_memory(meminfo)
    return MemoryBudget(total if total is not None else 8 * GIB,
                        "MemTotal" if total is not None else "assumed 8 GiB")
