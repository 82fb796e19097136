"""Runtime tuning keeps the memory budget: its probe processes each hold the model, so only as
many start as fit beside what the process tree holds (issue 18)."""

from __future__ import annotations

import pytest

from optimizer.runtime_tuning import RuntimeTuningError, thread_grid, tune_runtime
from optimizer.runtime_tuning.grid import reference_setting
from optimizer.runtime_tuning.tune import probe_bytes, probes_that_fit
from optimizer.system.cpu_threads import available_cpus
from optimizer.system.memory_budget import MemoryBudget
from optimizer.system.process_tree import tree_rss_bytes

CPUS = available_cpus().available


def _budget_for(model: str, probes: float) -> MemoryBudget:
    """A budget with room for ``probes`` probe processes beside this process tree, by the
    estimate the tuning itself uses."""
    return MemoryBudget(tree_rss_bytes() + int(probes * probe_bytes(model)), "test")


def test_only_the_reference_and_the_probes_that_fit_start_the_rest_named(model_dir):
    model = str(model_dir("keras_cnn"))
    grid, reference = thread_grid(CPUS), reference_setting(CPUS, False)
    assert len(grid) >= 3
    said = []
    kept = probes_that_fit(model, grid, reference, _budget_for(model, 2.5), said.append)
    assert kept[0] == reference and len(kept) == 2 and set(kept) <= set(grid)
    assert len(said) == 1 and "left out" in said[0]
    assert all(s.label in said[0] for s in grid if s not in kept)
    assert probes_that_fit(model, grid, reference, _budget_for(model, len(grid) + 1),
                           said.append) == grid and len(said) == 1


def test_a_budget_below_one_probe_is_refused_in_one_line_before_any_probe_starts(model_dir):
    model = str(model_dir("keras_cnn"))
    with pytest.raises(RuntimeTuningError) as refused:
        tune_runtime(model, budget=_budget_for(model, 0.5))
    assert "\n" not in str(refused.value) and "memory budget" in str(refused.value)


def test_a_model_tuned_within_room_for_one_probe_is_measured_at_the_reference(model_dir):
    model = str(model_dir("keras_cnn"))
    said = []
    tuned = tune_runtime(model, rounds=1, seconds_per_probe=0.1, batch_sizes=(1,),
                         time_budget_seconds=1.0, progress=said.append,
                         budget=_budget_for(model, 1.5))
    reference = reference_setting(CPUS, False)
    assert [p.setting for p in tuned.thread_probes] == [reference]
    assert any("left out" in line for line in said)
