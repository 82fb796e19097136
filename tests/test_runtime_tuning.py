"""Runtime tuning on keras_cnn with a tiny time budget: every probe process runs with its own
thread setting, the winner is one of them, the batch-size recommendation agrees with the curve it
was made from, an unreachable target says so, and the settings file round-trips.

No timing is asserted: the figures only have to be consistent with themselves.
"""

import json
import shutil

import pytest

from tfopt.optimizer.errors import (
    DestinationError,
    NotASavedModelError,
    SourceNotFoundError,
    UnknownSignatureError,
)
from tfopt.optimizer.runtime_tuning import (
    RUNTIME_SETTINGS_FILE,
    TAG_PREFIX,
    BatchPoint,
    RuntimeTuningError,
    ThreadProbe,
    ThreadSetting,
    TunedRuntimeSettings,
    choose_setting,
    measure_batch_curve,
    recommend_batch,
    search_threads,
    thread_grid,
    tune_runtime,
)
from tfopt.optimizer.system.cpu_threads import available_cpus

CPUS = available_cpus().available
# Inter-op 2 only matters for models with parallel branches; two settings keep start-up short.
GRID = [s for s in thread_grid(CPUS) if s.inter_op_threads == 1]
BATCH_SIZES = (1, 2, 4, 8)
UNREACHABLE = 1e12  # items/s


@pytest.fixture(scope="module")
def tuned(model_dir):
    messages = []
    result = tune_runtime(model_dir("keras_cnn"), throughput_target=UNREACHABLE, grid=GRID,
                          rounds=2, seconds_per_probe=0.2, batch_sizes=BATCH_SIZES,
                          time_budget_seconds=2.0, progress=messages.append)
    return result, messages


def test_each_probe_runs_with_its_own_threads_and_the_best_is_one_of_the_grid(tuned):
    result, messages = tuned
    assert [p.setting for p in result.thread_probes] == GRID
    for probe in result.thread_probes:
        setting = probe.setting
        assert probe.in_effect == {"intra_op_threads": setting.intra_op_threads,
                                   "inter_op_threads": setting.inter_op_threads}
        assert len(probe.p50_seconds) == len(probe.ratios) == 2
    reference = next(p for p in result.thread_probes if p.setting == result.reference)
    assert reference.ratios == (1.0, 1.0)
    assert result.threads in GRID
    assert any(m.startswith("thread search round 2/2") for m in messages)


def test_the_batch_curve_is_an_ascending_prefix_within_the_budget(tuned):
    result, _ = tuned
    measured = [p.batch_size for p in result.batch_curve]
    assert measured == list(BATCH_SIZES[:len(measured)]) and measured[0] == 1
    assert measured + list(result.batches_not_measured) == list(BATCH_SIZES)
    assert all(p.p50_seconds > 0 and p.runs >= 3 for p in result.batch_curve)


def test_an_unreachable_throughput_target_is_reported_as_such(tuned):
    result, _ = tuned
    assert result.recommended_batch_size is None
    assert result.batch_reason.startswith("unreachable: no measured batch size reaches 1e+12")
    best = max(result.batch_curve, key=lambda p: p.throughput)
    assert f"at batch {best.batch_size}" in result.batch_reason


def test_each_recommendation_agrees_with_the_measured_curve(tuned):
    """Every measured throughput taken as a target, and every p50 as a latency SLO."""
    curve = tuned[0].batch_curve
    for target in [p.throughput for p in curve]:
        chosen = recommend_batch(curve, throughput_target=target).batch_size
        by_batch = {p.batch_size: p for p in curve}
        assert by_batch[chosen].throughput >= target
        assert all(p.throughput < target for p in curve if p.batch_size < chosen)
    for slo in [p.p50_seconds for p in curve]:
        chosen = recommend_batch(curve, latency_slo_seconds=slo).batch_size
        assert {p.batch_size: p for p in curve}[chosen].p50_seconds <= slo
        assert all(p.p50_seconds > slo for p in curve if p.batch_size > chosen)


def test_both_a_target_and_an_slo_pick_the_smallest_batch_meeting_both():
    curve = [BatchPoint(1, 0.010, 5), BatchPoint(2, 0.012, 5), BatchPoint(4, 0.016, 5),
             BatchPoint(8, 0.030, 5)]  # 100, 167, 250, 267 items/s
    assert recommend_batch(curve, throughput_target=150).batch_size == 2
    assert recommend_batch(curve, throughput_target=260, latency_slo_seconds=0.02) \
        .batch_size is None
    assert recommend_batch(curve, throughput_target=200, latency_slo_seconds=0.02) \
        .batch_size == 4
    assert "over the 5ms latency SLO" in recommend_batch(curve, latency_slo_seconds=0.005).reason


def test_the_settings_file_round_trips_and_says_how_to_apply_it(tuned, tmp_path):
    result, _ = tuned
    path = result.to_json(tmp_path / RUNTIME_SETTINGS_FILE)
    assert TunedRuntimeSettings.from_json(path) == result
    assert [f.name for f in tmp_path.iterdir()] == [RUNTIME_SETTINGS_FILE]
    written = json.loads(path.read_text())
    assert written["serving"]["env"] == {
        "TF_NUM_INTRAOP_THREADS": str(result.intra_op_threads),
        "TF_NUM_INTEROP_THREADS": str(result.inter_op_threads),
        "OMP_NUM_THREADS": str(result.intra_op_threads)}
    assert f"--tensorflow_intra_op_parallelism={result.intra_op_threads}" in \
        written["serving"]["tensorflow_model_server_flags"]
    with pytest.raises(DestinationError, match="already exists"):
        result.to_json(path)
    result.to_json(path, overwrite=True)


def test_tags_are_flat_strings_under_the_runtime_prefix(tuned):
    result, _ = tuned
    tags = result.to_tags()
    assert all(k.startswith(TAG_PREFIX) and isinstance(v, str) for k, v in tags.items())
    assert tags[TAG_PREFIX + "intra_op_threads"] == str(result.intra_op_threads)
    assert tags[TAG_PREFIX + "available_cpus"] == str(CPUS)
    assert TAG_PREFIX + "num_threads" not in tags  # a LiteRT knob; this is a SavedModel
    assert TAG_PREFIX + "recommended_batch_size" not in tags  # unreachable target


def _probe(setting: ThreadSetting, ratios) -> ThreadProbe:
    return ThreadProbe(setting, {}, tuple(0.01 * r for r in ratios), tuple(ratios))


def test_a_setting_replaces_the_reference_only_when_faster_by_a_margin_in_most_rounds():
    reference, other = ThreadSetting(2, 1), ThreadSetting(1, 1)
    ref = _probe(reference, [1.0] * 10)
    noisy = [0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 1.3, 1.3, 1.3, 1.3]  # median 0.7, faster in 6/10
    steady = [0.9] * 9 + [1.1]  # median 0.9, faster in 9/10
    marginal = [0.99] * 10  # faster every round, but by 1%
    assert choose_setting([ref, _probe(other, noisy)], reference).setting == reference
    assert choose_setting([ref, _probe(other, steady)], reference).setting == other
    assert choose_setting([ref, _probe(other, marginal)], reference).setting == reference
    assert choose_setting([ref, _probe(other, [0.5] * 4)], reference).setting == reference


def test_the_default_grid_is_deduplicated_and_bounded_by_the_cpus():
    assert thread_grid(1) == [ThreadSetting(1, 1)]
    assert thread_grid(2) == [ThreadSetting(1, 1), ThreadSetting(1, 2), ThreadSetting(2, 1),
                              ThreadSetting(2, 2)]
    assert {(s.intra_op_threads, s.inter_op_threads) for s in thread_grid(8)} == {
        (i, j) for i in (1, 2, 8) for j in (1, 2)}
    assert thread_grid(2, per_model=True) == [ThreadSetting(num_threads=1),
                                           ThreadSetting(num_threads=2)]


@pytest.mark.parametrize("call, message", [
    (lambda m: ThreadSetting(0, 1), "intra_op_threads must be a positive integer, got 0"),
    (lambda m: ThreadSetting(num_threads=-2), "num_threads must be a positive integer, got -2"),
    (lambda m: ThreadSetting(2, None), "give both intra_op_threads and inter_op_threads"),
    (lambda m: tune_runtime(m, throughput_target=-5),
     "throughput_target must be a positive number, got -5"),
    (lambda m: tune_runtime(m, latency_slo_ms=0), "latency_slo_ms must be a positive number"),
    (lambda m: tune_runtime(m, batch_sizes=(1, 0)), "batch size must be a positive integer"),
    (lambda m: search_threads(m, grid=[ThreadSetting(CPUS + 1, 1)]),
     "reference setting .* is not in the grid"),
    (lambda m: search_threads(m, grid=[ThreadSetting(CPUS + 1, 1)],
                              reference=ThreadSetting(CPUS + 1, 1)),
     f"use more threads than the {CPUS} CPU"),
    (lambda m: search_threads(m, min_gain=1.5), r"min_gain must be in \[0, 1\)"),
    (lambda m: search_threads(m, grid=[ThreadSetting(num_threads=1)],
                              reference=ThreadSetting(num_threads=1)),
     "num_threads is a LiteRT setting"),
])
def test_bad_settings_are_one_line_errors_before_any_probe_starts(model_dir, call, message):
    with pytest.raises(RuntimeTuningError, match=message) as error:
        call(model_dir("keras_cnn"))
    assert error.value.exit_code == 2 and "\n" not in str(error.value)


def test_a_missing_model_or_signature_is_refused_before_any_probe_starts(model_dir, tmp_path):
    with pytest.raises(SourceNotFoundError, match="no such model"):
        search_threads(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotASavedModelError):
        search_threads(tmp_path / "empty")
    with pytest.raises(UnknownSignatureError, match="'predict' not found"):
        tune_runtime(model_dir("keras_cnn"), signature="predict")


def test_a_probe_that_cannot_load_the_model_reports_why(model_dir, tmp_path):
    """saved_model.pb reads fine here; its variables are gone, which only loading finds."""
    broken = tmp_path / "no_variables"
    shutil.copytree(model_dir("keras_cnn"), broken)
    shutil.rmtree(broken / "variables")
    with pytest.raises(RuntimeTuningError,
                       match=r"probe \[intra=1 inter=1\]: cannot load SavedModel"):
        search_threads(broken, grid=[ThreadSetting(1, 1)], reference=ThreadSetting(1, 1),
                       rounds=1, seconds_per_probe=0.1)


def _converted(fmt: str, source, directory):
    if fmt == "tflite":
        from tfopt.optimizer.candidates.litert.convert import convert_to_litert

        return convert_to_litert(source, directory / "cnn.tflite", "fp32").path
    if fmt == "onnx":
        from tfopt.optimizer.candidates.onnx.convert import convert_to_onnx

        return convert_to_onnx(source, directory / "cnn.onnx", "fp32").path
    from tfopt.optimizer.candidates.openvino.convert import convert_to_openvino

    return convert_to_openvino(source, directory / "cnn.xml", "fp32").path


@pytest.mark.parametrize("fmt, option", [("tflite", "num_threads"),
                                         ("onnx", "intra_op_num_threads"),
                                         ("openvino", "INFERENCE_NUM_THREADS")])
def test_a_model_of_a_per_model_runtime_is_tuned_over_its_own_thread_count(model_dir, tmp_path,
                                                                           fmt, option):
    model = _converted(fmt, model_dir("keras_cnn"), tmp_path)
    search = search_threads(model, rounds=1, seconds_per_probe=0.1)
    assert [p.setting for p in search.probes] == thread_grid(CPUS, per_model=True)
    for probe in search.probes:  # as the runtime reports it back in each probe process
        assert probe.in_effect == {"num_threads": probe.setting.num_threads}
    assert search.best.num_threads in {1, 2, CPUS}
    curve = measure_batch_curve(model, ThreadSetting(num_threads=1), batch_sizes=(1, 2),
                                time_budget_seconds=2.0)
    # batch 2 may be left out on a loaded machine (batch 1's warm-up and pipe overran its
    # share of the 2 s): the curve must still account for it, never drop it silently
    measured = [p.batch_size for p in curve.points]
    assert measured[:1] == [1] and measured + list(curve.not_measured) == [1, 2]
    settings = TunedRuntimeSettings(
        model=str(model), intra_op_threads=None, inter_op_threads=None, num_threads=2,
        recommended_batch_size=None, batch_reason="", throughput_target=None,
        latency_slo_ms=None, reference=search.reference, thread_probes=search.probes,
        batch_curve=curve.points, batches_not_measured=curve.not_measured, available_cpus=CPUS,
        cpu_quota=None, cpu_model="")
    serving = settings.to_dict()["serving"]
    assert [v for k, v in serving.items() if k != "note"] == [{option: 2}]
