"""RESULT.json: a lossless JSON round trip, and one clear error for anything that is not one."""

import json

import numpy as np
import pytest
from benchmark_testing import noisy_samples, synthetic_result, top1_fidelity

from tfopt.optimizer.benchmark.result import FORMAT_VERSION, BenchmarkResult, Quality, load_result
from tfopt.optimizer.errors import BenchmarkResultError


@pytest.fixture
def result():
    quality = Quality("top1", 0.95, True, 100, "eval.npz")
    return synthetic_result(
        {1: noisy_samples(0.002, 60, 0), 32: noisy_samples(0.02, 60, 1)},
        {"fast": {"samples": {1: noisy_samples(0.001, 60, 2), 32: noisy_samples(0.01, 60, 3)},
                  "quality": Quality("top1", 0.94, True, 100, "eval.npz"),
                  "fidelity": top1_fidelity(0.99, 1e-3)}},
        baseline_quality=quality)


def test_json_round_trip_is_lossless(result, tmp_path):
    path = result.save(tmp_path / "out" / "RESULT.json")
    loaded = load_result(path)
    assert loaded == result
    assert loaded.candidate("fast").samples[1] == result.candidate("fast").samples[1]
    assert not list(path.parent.glob(".*partial"))


def test_json_is_plain_data_with_batch_sizes_as_keys(result):
    data = json.loads(result.to_json())
    assert data["format_version"] == FORMAT_VERSION
    assert set(data["baseline"]["latency"]) == {"1", "32"}
    assert data["ratios"]["fast"]["1"]["confidence"] == 0.95
    assert data["environment"]["runtime"]["cpus"]["available"] == 2
    assert BenchmarkResult.from_dict(data) == result


def test_a_result_written_before_the_later_keys_still_loads(result, tmp_path):
    data = result.to_dict()
    for measurement in (data["baseline"], *data["candidates"]):
        for key in ("format", "runtime", "num_threads", "block_size"):
            del measurement[key]
    for key in ("reference", "twin", "notes"):
        del data[key]
    del data["settings"]["block_size"]
    path = tmp_path / "RESULT.json"
    path.write_text(json.dumps(data))
    loaded = load_result(path)
    assert (loaded.baseline.format, loaded.baseline.runtime) == ("savedmodel", "tensorflow")
    assert loaded.baseline.block_size is None and loaded.settings.block_size == 1
    assert (loaded.notes, loaded.reference, loaded.twin) == ((), None, None)
    assert loaded.candidate("fast").samples == result.candidate("fast").samples


def test_the_json_keeps_the_formats_key_order(result):
    data = json.loads(result.to_json())
    assert list(data) == ["format_version", "created", "wall_seconds", "settings", "environment",
                          "baseline", "candidates", "reference", "twin", "ratios", "notes"]
    assert list(data["baseline"])[:8] == ["label", "role", "path", "digest", "format", "runtime",
                                          "num_threads", "size_bytes"]
    assert "baseline_samples" not in data["baseline"]  # written only for grouped benchmarks


@pytest.mark.parametrize("content, message", [
    ("{", "is not JSON"),
    ("[1, 2]", "is not a tfopt benchmark result"),
    ('{"format_version": 99}', "has result format 99; this tfopt reads format 1"),
    ('{"format_version": 1}', "is missing field"),
])
def test_bad_result_files_are_one_clear_error(tmp_path, content, message):
    path = tmp_path / "RESULT.json"
    path.write_text(content)
    with pytest.raises(BenchmarkResultError, match=message):
        load_result(path)


@pytest.mark.parametrize("mangle", [
    lambda d: d["baseline"]["latency"]["1"].update(p50={"not": "a number"}),
    lambda d: d["candidates"][0]["samples"].update({"1": "fast"}),
    lambda d: d["ratios"]["fast"]["1"].update(high=None),
    lambda d: d.update(candidates={"fast": 1}),
])
def test_a_result_with_a_mangled_field_is_malformed_not_a_crash(result, tmp_path, mangle):
    data = result.to_dict()
    mangle(data)
    path = tmp_path / "RESULT.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BenchmarkResultError, match="malformed benchmark result"):
        load_result(path)


def test_missing_result_file(tmp_path):
    with pytest.raises(BenchmarkResultError, match="no such benchmark result"):
        load_result(tmp_path / "nothing.json")
    with pytest.raises(BenchmarkResultError, match="is a directory"):
        load_result(tmp_path)


def test_samples_stay_paired_by_round(result):
    base, cand = result.baseline.samples[1], result.candidate("fast").samples[1]
    assert len(base) == len(cand) == result.ratios["fast"][1].rounds
    assert np.median(np.asarray(cand) / np.asarray(base)) == pytest.approx(
        result.ratios["fast"][1].ratio)  # the median of the per-round ratios


def test_the_block_size_travels_with_the_result_and_an_older_result_read_as_one_call(tmp_path):
    blocked = synthetic_result({1: noisy_samples(0.002, 40, 0)},
                               {"fast": {"samples": {1: noisy_samples(0.001, 40, 1)}}},
                               block_size=4)
    loaded = load_result(blocked.save(tmp_path / "blocked.json"))
    assert loaded.settings.block_size == 4
    assert len(loaded.round_figures(loaded.candidate("fast"), 1)) == 10
    data = json.loads(blocked.to_json())
    del data["settings"]["block_size"]  # as written before blocks
    (tmp_path / "older.json").write_text(json.dumps(data))
    older = load_result(tmp_path / "older.json")
    assert older.settings.block_size == 1
    assert len(older.round_figures(older.baseline, 1)) == 40
