"""Run the real ``tfopt`` console script in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tfopt.components.cli.stage_lines import PREFIX as STAGE_PREFIX

TFOPT = Path(sys.executable).parent / "tfopt"


def run_tfopt(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TFOPT_DEBUG", None)
    return subprocess.run([str(TFOPT), *map(str, args)], check=False, capture_output=True,
                          text=True, timeout=timeout, env=env)


def error_lines(stderr: str) -> list[str]:
    """stderr's lines but the stage lines (components/cli/stage_lines.py), which say what ran
    before the failure."""
    return [line for line in stderr.splitlines()
            if line.strip() and not line.startswith(STAGE_PREFIX)]


def assert_clean_failure(result: subprocess.CompletedProcess, exit_code: int, *phrases: str):
    """Exit code as documented, one line on stderr naming the problem (besides the stage
    lines), no traceback."""
    assert result.returncode == exit_code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = error_lines(result.stderr)
    assert len(lines) == 1, f"expected one line on stderr, got: {result.stderr!r}"
    for phrase in phrases:
        assert phrase in lines[0], f"{phrase!r} not in {lines[0]!r}"


def assert_chosen_is_the_fastest_or_a_more_precise_tie(rows: dict, chosen: str):
    """The gate serves the fastest promoted candidate, unless one whose speedup interval overlaps
    the fastest one's keeps more precision (tfopt.optimizer.gate.near_ties): whichever it chose, the table's
    figures must say why."""
    from tfopt.optimizer.gate.near_ties import precision_of_label, precision_rank

    promoted = [r for r in rows.values() if r["verdict"] in ("chosen", "passed")]
    fastest = max(promoted, key=lambda r: r["speedup"])
    if rows[chosen]["speedup"] == fastest["speedup"]:
        return
    (low, high), (f_low, f_high) = rows[chosen]["ratio_interval"], fastest["ratio_interval"]
    assert low <= f_high and f_low <= high, f"{chosen} is slower than {fastest['label']}, no tie"
    assert (precision_rank(precision_of_label(chosen))
            < precision_rank(precision_of_label(fastest["label"]))), (
        f"{chosen} was chosen over the faster {fastest['label']} without more precision")
