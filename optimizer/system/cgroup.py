"""This process's control groups: where its CPU and memory limits are read from.

A container's limits are its cgroup's, or an ancestor's: a parent's limit binds too. Both
layouts are read: cgroup v2 (one unified tree, ``0::/path`` in ``/proc/self/cgroup``) and v1
(one tree per controller, ``N:cpu,cpuacct:/path``).
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


def own_cgroup_paths(proc_cgroup: Path) -> dict[str, str]:
    """Controller -> this process's cgroup path, from ``/proc/self/cgroup``; '' is cgroup v2."""
    try:
        text = proc_cgroup.read_text()
    except OSError:
        return {}
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                paths[controller] = parts[2]
    return paths


def with_ancestors(base: Path, relative: str) -> list[Path]:
    """``base/relative`` and each of its parents up to ``base`` itself."""
    dirs, current = [], base
    dirs.append(current)
    for part in [p for p in relative.split("/") if p]:
        current = current / part
        dirs.append(current)
    return dirs[::-1]
