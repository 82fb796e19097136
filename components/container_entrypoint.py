"""The image's entrypoint: size the thread pools from the container's CPU quota, then exec.

A container limited to 2 CPUs on a 64-core node still sees 64 CPUs in ``os.cpu_count()``, and
TensorFlow and OpenMP size their thread pools from that count by default: 64 threads on 2 CPUs'
worth of quota, throttled by the scheduler every period. They read their sizes from the
environment once, at start-up (``OMP_NUM_THREADS``; ``TF_NUM_INTRAOP_THREADS`` and
``TF_NUM_INTEROP_THREADS`` when TF creates its runtime), so the values have to be there before
the process that imports TensorFlow starts. This wrapper derives them with
:mod:`tfopt.optimizer.system.cpu_threads` (affinity mask and cgroup v1/v2 quota, the same numbers the
benchmark records), fills them into the environment and replaces itself with the command
(``execvp``), which keeps the command's PID, signals and exit code.

A variable that is already set (``docker run -e``, the pod spec) wins: only missing ones are
filled in, so an operator can always pin threads by hand.

    python -m tfopt.components.orchestration.container_entrypoint tfopt step benchmark --config pipeline.yaml

This module must stay light: it runs before every command in the image and imports no
TensorFlow, only the standard library and ``tfopt.optimizer.system.cpu_threads``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from tfopt.optimizer.system.cpu_threads import (
    CGROUP_ROOT,
    PROC_SELF_CGROUP,
    CpuAvailability,
    available_cpus,
    default_runtime_settings,
)

PROG = "tfopt-entrypoint"
EXIT_USAGE = 2
EXIT_NOT_EXECUTABLE = 126  # the shell's codes, so a pod's exit reason reads the usual way
EXIT_NOT_FOUND = 127


def thread_environment(cpus: CpuAvailability) -> dict[str, str]:
    """OpenMP and TensorFlow thread settings for the CPUs really available."""
    settings = default_runtime_settings(cpus=cpus)
    return {
        **settings.env_vars(),
        "TF_NUM_INTRAOP_THREADS": str(settings.intra_op_threads),
        "TF_NUM_INTEROP_THREADS": str(settings.inter_op_threads),
    }


def environment_for_command(environ: Mapping[str, str], derived: Mapping[str, str]
                            ) -> tuple[dict[str, str], dict[str, str]]:
    """``(the command's environment, the derived values actually used)``; set values win."""
    env = dict(environ)
    filled = {key: value for key, value in derived.items() if key not in env}
    env.update(filled)
    return env, filled


def _describe(cpus: CpuAvailability, filled: Mapping[str, str], kept: list[str]) -> str:
    quota = (f"cgroup quota {cpus.quota_cpus:g} CPUs ({cpus.quota_source})"
             if cpus.quota_cpus is not None else "no cgroup CPU quota")
    parts = [f"{key}={value}" for key, value in sorted(filled.items())]
    parts += [f"{key} kept as set" for key in sorted(kept)]
    return f"{PROG}: {cpus.available} CPUs available ({quota}): {', '.join(parts)}"


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None,
         cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_SELF_CGROUP,
         exec_command: Callable[[str, list[str], dict[str, str]], object] = os.execvpe) -> int:
    """Exec ``argv`` with the derived thread settings; returns only when the exec failed."""
    argv = sys.argv[1:] if argv is None else list(argv)
    environ = os.environ if environ is None else environ
    if not argv:
        print("usage: python -m tfopt.components.orchestration.container_entrypoint COMMAND [ARG ...]",
              file=sys.stderr)
        return EXIT_USAGE
    cpus = available_cpus(cgroup_root, proc_cgroup)
    derived = thread_environment(cpus)
    env, filled = environment_for_command(environ, derived)
    print(_describe(cpus, filled, [k for k in derived if k not in filled]), file=sys.stderr,
          flush=True)
    try:
        exec_command(argv[0], argv, env)
    except FileNotFoundError:
        print(f"{PROG}: command not found: {argv[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except PermissionError:
        print(f"{PROG}: command not executable: {argv[0]}", file=sys.stderr)
        return EXIT_NOT_EXECUTABLE
    return 0  # only reached when exec_command is a stand-in that returns


if __name__ == "__main__":
    sys.exit(main())
