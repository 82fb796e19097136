"""The memory budget: the tightest cgroup limit (v1 or v2), else the configured one."""

import pytest

from tfopt.optimizer.system.memory_budget import GIB, MemoryBudget, MemoryBudgetError, memory_budget


def _tree(tmp_path, v2: dict[str, str] | None = None, v1: dict[str, str] | None = None,
          own: str = "/kubepods/pod1/ctr"):
    root = tmp_path / "cgroup"
    for relative, value in (v2 or {}).items():
        directory = root / relative.strip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "memory.max").write_text(value + "\n")
    for relative, value in (v1 or {}).items():
        directory = root / "memory" / relative.strip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "memory.limit_in_bytes").write_text(value + "\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text(f"0::{own}\n" if v2 else f"4:memory:{own}\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemFree: 1 kB\n")
    return root, proc, meminfo


def test_a_v2_limit_of_the_container_or_a_parent_binds(tmp_path):
    root, proc, meminfo = _tree(tmp_path, v2={"/": "max", "/kubepods/pod1": str(6 * GIB),
                                              "/kubepods/pod1/ctr": "max"})
    budget = memory_budget(None, root, proc, meminfo)
    assert budget.bytes == 6 * GIB and budget.source.endswith("kubepods/pod1/memory.max")


def test_a_v1_limit_is_read_and_its_huge_no_limit_value_ignored(tmp_path):
    root, proc, meminfo = _tree(tmp_path, v1={"/": "9223372036854771712",
                                              "/kubepods/pod1/ctr": str(3 * GIB)})
    assert memory_budget(None, root, proc, meminfo).bytes == 3 * GIB
    root, proc, meminfo = _tree(tmp_path / "none", v1={"/": "9223372036854771712"})
    assert memory_budget(None, root, proc, meminfo) == MemoryBudget(24 * GIB, "MemTotal")


def test_the_configured_budget_applies_without_a_limit_and_cannot_exceed_one(tmp_path):
    root, proc, meminfo = _tree(tmp_path, v2={"/": "max"})
    assert memory_budget(4.0, root, proc, meminfo) == MemoryBudget(4 * GIB,
                                                                   "resources.memory_gb")
    root, proc, meminfo = _tree(tmp_path / "limited", v2={"/kubepods/pod1/ctr": str(2 * GIB)})
    assert memory_budget(4.0, root, proc, meminfo).bytes == 2 * GIB
    assert memory_budget(1.0, root, proc, meminfo).bytes == 1 * GIB


def test_work_over_the_budget_is_refused_in_one_line_with_both_figures():
    with pytest.raises(MemoryBudgetError) as caught:
        MemoryBudget(2 * GIB, "resources.memory_gb").require(int(5.5 * GIB), "optimizing mlp")
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 7
    assert message.startswith("optimizing mlp needs an estimated 5.5 GiB of memory, more than "
                              "the budget of 2.0 GiB (resources.memory_gb)")
