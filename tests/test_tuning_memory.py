"""Runtime tuning keeps the memory budget (issue 18): its probe processes each hold the model,
so the reference starts alone, the others only as many as fit beside it by its measured peak,
and a probe that takes the process tree over the budget all the same is stopped by the memory
watchdog and left out, named with its figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfopt.optimizer.model.op_scan import DEFAULT_POLICY
from tfopt.optimizer.runtime_tuning import RuntimeTuningError, thread_grid, tune_runtime
from tfopt.optimizer.runtime_tuning import probes as probes_module
from tfopt.optimizer.runtime_tuning.budget import (
    PROBE_MARGIN,
    probe_bytes,
    probes_beside,
    process_peak_bytes,
)
from tfopt.optimizer.runtime_tuning.grid import reference_setting
from tfopt.optimizer.runtime_tuning.probes import Probes
from tfopt.optimizer.system.cpu_threads import available_cpus
from tfopt.optimizer.system.memory_budget import MemoryBudget
from tfopt.optimizer.system.process_tree import tree_rss_bytes

CPUS = available_cpus().available
REFERENCE = reference_setting(CPUS, False)
# the reference first, as tuning orders it; the last setting is the one a hog plays
GRID = [REFERENCE, *(s for s in thread_grid(CPUS) if s != REFERENCE)]
QUICK = {"rounds": 1, "seconds_per_probe": 0.1, "batch_sizes": (1,), "time_budget_seconds": 1.0}


def _budget(extra: float) -> MemoryBudget:
    """A budget of ``extra`` bytes beside this process tree as it is now."""
    return MemoryBudget(tree_rss_bytes() + int(extra), "test")


@pytest.fixture(scope="module")
def reference_peak(model_dir) -> int:
    """The high-water mark of the reference's probe holding keras_cnn, measured once alone."""
    model = str(model_dir("keras_cnn"))
    with Probes(model, "serving_default", [REFERENCE], lambda _: None, DEFAULT_POLICY,
                _budget(8 * 2**30)) as running:
        return process_peak_bytes(running[REFERENCE].pid)


@pytest.fixture
def hog(monkeypatch):
    """``hog(setting)``: that setting's probe allocates until it is stopped (the other probes
    are the real worker's)."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    monkeypatch.setattr(probes_module, "WORKER_MODULE", "hog_probe_worker")
    return lambda setting: monkeypatch.setenv("HOG_SETTING", setting.label)


def test_room_for_more_probes_is_counted_at_the_measured_peak_plus_the_margin():
    peak = 700 * 2**20
    per_probe = peak * (1 + PROBE_MARGIN)
    assert probes_beside(peak, _budget(2.5 * per_probe)).count == 2
    assert probes_beside(peak, _budget(0.9 * per_probe)).count == 0
    assert probes_beside(peak, MemoryBudget(1, "test")).count == 0


def test_a_budget_below_one_probe_by_estimate_is_refused_in_one_line_before_any_probe_starts(
        model_dir):
    model = str(model_dir("keras_cnn"))
    with pytest.raises(RuntimeTuningError) as refused:
        tune_runtime(model, budget=_budget(0.5 * probe_bytes(model)))
    assert "\n" not in str(refused.value) and "memory budget" in str(refused.value)


def test_the_reference_starts_alone_and_the_others_are_sized_from_its_measured_peak(
        model_dir, reference_peak):
    assert len(GRID) >= 3
    model = str(model_dir("keras_cnn"))
    per_probe = reference_peak * (1 + PROBE_MARGIN)
    # room for the reference and, by its measured peak, exactly one more (by the load estimate,
    # which is below the measurement for keras_cnn, it would be more)
    budget = _budget(reference_peak + 1.5 * per_probe)
    said = []
    tuned = tune_runtime(model, grid=GRID, progress=said.append, budget=budget, **QUICK)
    assert [p.setting for p in tuned.thread_probes] == GRID[:2]
    starts = [line for line in said if line.startswith("starting")]
    assert "alone" in starts[0] and REFERENCE.label in starts[0]
    assert starts[1] == "starting 1 more probe process(es)"
    left_out = [line for line in said if "left out" in line]
    assert len(left_out) == 1 and "peaked at" in left_out[0]
    assert all(s.label in left_out[0] for s in GRID[2:])


def test_a_probe_over_the_budget_is_stopped_and_tuning_goes_on_with_the_others(
        model_dir, reference_peak, hog):
    model = str(model_dir("keras_cnn"))
    grid = GRID[:3]
    hog(grid[2])
    budget = _budget(reference_peak + 2.5 * reference_peak * (1 + PROBE_MARGIN))
    said = []
    tuned = tune_runtime(model, grid=grid, progress=said.append, budget=budget, **QUICK)
    assert [p.setting for p in tuned.thread_probes] == grid[:2]
    stopped = [line for line in said if line.startswith(f"thread setting [{grid[2].label}] "
                                                        "left out: stopped at")]
    assert len(stopped) == 1
    assert "GiB, over the memory budget of" in stopped[0] and budget.describe() in stopped[0]
    assert tuned.recommended_batch_size is None and tuned.batch_curve  # measured, no target


def test_a_reference_over_the_budget_refuses_tuning_in_one_line(model_dir, hog):
    model = str(model_dir("keras_cnn"))
    hog(REFERENCE)
    with pytest.raises(RuntimeTuningError) as refused:
        tune_runtime(model, grid=GRID, budget=_budget(1.5 * probe_bytes(model)), **QUICK)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"probe [{REFERENCE.label}] stopped at")
    assert "over the memory budget of" in message


def test_a_batch_size_that_takes_the_probe_over_the_budget_is_left_out_with_the_figure(
        tmp_path, reference_peak):
    import keras

    # batch 512 of this input is 1 GiB of float32 (made when the batch is asked for); batch 1,
    # 2 MiB and a call of about a millisecond, so 512 is within the time budget
    inputs = keras.Input((512 * 1024,), name="wide")
    keras.Model(inputs, keras.layers.Dense(4)(inputs)).export(str(tmp_path / "wide"),
                                                               verbose=False)
    budget = _budget((reference_peak + 400 * 2**20) * (1 + PROBE_MARGIN))
    said = []
    tuned = tune_runtime(tmp_path / "wide", grid=[REFERENCE], progress=said.append,
                         budget=budget, rounds=1, seconds_per_probe=0.1, batch_sizes=(1, 512),
                         time_budget_seconds=6.0, latency_slo_ms=1e6)
    assert [p.batch_size for p in tuned.batch_curve] == [1]
    assert tuned.batches_not_measured == (512,)
    assert tuned.recommended_batch_size == 1
    assert "512 not measured: the probe was stopped at" in tuned.batch_reason, said
    assert any(line.startswith("batch sizes 512 left out: the probe was stopped at")
               for line in said)
