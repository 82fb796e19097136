"""The pipeline YAML: typed, validated, with overrides; bad input named precisely."""

import pytest
from fuzzing import alias_bomb

from tfopt.components.config.pipeline_config import ConfigError, config_from_mapping, load_config


def test_defaults_fill_everything_but_the_source():
    config = config_from_mapping({"source": "s3://bucket/models/digits"})
    assert config.signature == "serving_default"
    assert config.mlflow.alias == "champion"
    assert config.gate.min_speedup >= 1.0
    assert config.execution.mode == "in_process"


def test_overrides_use_dotted_keys_and_yaml_values():
    config = config_from_mapping({"source": "/m"}, overrides=[
        "gate.min_speedup=1.2", "benchmark.batch_sizes=[1, 32]", "mlflow.alias=prod"])
    assert config.gate.min_speedup == 1.2
    assert config.benchmark.batch_sizes == [1, 32]
    assert config.mlflow.alias == "prod"


@pytest.mark.parametrize("data,message", [
    ({}, "missing required key 'source'"),
    ({"source": "/m", "gate": {"min_spedup": 1.1}}, "unknown key 'gate.min_spedup'"),
    ({"source": "/m", "s3": {"aws_secret_access_key": "x"}},
     "unknown key 's3.aws_secret_access_key'"),
    ({"source": "/m", "benchmark": {"batch_sizes": [0]}}, "benchmark.batch_sizes"),
    ({"source": "/m", "execution": {"mode": "ssh"}}, "execution.mode"),
    ({"source": "/m", "gate": {"min_speedup": "fast"}}, "gate.min_speedup"),
    ({"source": "/m", "benchmark": {"block_size": 0}},
     "key 'benchmark.block_size': Input should be greater than or equal to 1"),
    ({"source": "/m", "calibration": {"data": ["a.npz"]}}, "key 'calibration.data'"),
    ({"source": "/m", "calibration": {"labels": "y.npz"}}, "unknown key 'calibration.labels'"),
])
def test_bad_configs_name_the_key(data, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("[", r"\[")):
        config_from_mapping(data)


def test_yaml_with_python_tags_is_rejected_without_running_code(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(f"source: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(path)
    assert not marker.exists()


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.yaml")


def test_fingerprint_ignores_scheduling_but_not_the_recipe():
    base = config_from_mapping({"source": "/m"})
    rescheduled = config_from_mapping({"source": "/m", "schedule": {"cron": "@hourly"}})
    other_recipe = config_from_mapping({"source": "/m",
                                        "optimize": {"recipe": "strip_unused_nodes"}})
    assert base.fingerprint() == rescheduled.fingerprint()
    assert base.fingerprint() != other_recipe.fingerprint()


def test_calibration_data_and_block_size_have_defaults_and_change_the_fingerprint():
    base = config_from_mapping({"source": "/m"})
    assert (base.calibration.data, base.benchmark.block_size) == (None, 10)
    calibrated = config_from_mapping({"source": "/m"}, overrides=[
        "calibration.data=s3://bucket/inputs.npz", "benchmark.block_size=1"])
    assert calibrated.calibration.data == "s3://bucket/inputs.npz"
    assert calibrated.benchmark.block_size == 1
    assert calibrated.fingerprint() != base.fingerprint()


def test_the_native_backend_defaults_to_gtts_own_recipe_and_keeps_a_given_one():
    from tfopt.optimizer.optimize.gtt_syntax import parse_transforms
    from tfopt.optimizer.optimize.native_gtt import KNOWN_NATIVE_TRANSFORMS
    from tfopt.optimizer.optimize.recipe import GTT_INFERENCE_RECIPE, INFERENCE_RECIPE

    native = config_from_mapping({"source": "/m", "optimize": {"backend": "native"}})
    assert native.optimize.recipe == GTT_INFERENCE_RECIPE
    assert {t.name for t in parse_transforms(native.optimize.recipe)} <= set(KNOWN_NATIVE_TRANSFORMS)
    python = config_from_mapping({"source": "/m"})
    assert python.optimize.recipe == INFERENCE_RECIPE
    given = config_from_mapping({"source": "/m",
                                 "optimize": {"backend": "native", "recipe": "fold_constants"}})
    assert given.optimize.recipe == "fold_constants"


def test_the_search_benchmark_and_tolerance_keys_are_the_librarys_settings():
    from tfopt.components.steps.optimize import search_settings_of
    from tfopt.optimizer.benchmark.settings import BenchmarkConfig
    from tfopt.optimizer.search.settings import SearchSettings
    from tfopt.optimizer.verify.tolerance import Tolerance

    config = config_from_mapping({"source": "/m", "optimize": {"strategy": "relaxed"}})
    assert search_settings_of(config) == SearchSettings(strategy="relaxed")
    assert config.benchmark.settings() == BenchmarkConfig()
    assert Tolerance(atol=config.optimize.atol, rtol=config.optimize.rtol,
                     min_top1=config.optimize.min_top1) == Tolerance()
    # what the library refuses, the config refuses, naming the key
    for key, value in [("optimize.alpha", 0.99), ("optimize.time_budget_seconds", 0),
                       ("optimize.min_top1", 1.5), ("optimize.atol", ".nan"),
                       ("benchmark.min_runs", 1), ("gate.confidence", 1),
                       ("tuning.rounds", 0)]:
        with pytest.raises(ConfigError, match=f"key '{key}'"):
            config_from_mapping({"source": "/m"}, overrides=[f"{key}={value}"])


# 9**6 = 531,441 strings: past MAX_CONFIG_VALUES, and still only ~100 MB should a regression
# expand it in this process
ALIAS_BOMB = alias_bomb(6)


def test_an_alias_bomb_in_a_set_value_is_refused_at_once(tmp_path):
    import time

    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"^--set 'evaluation.data': YAML anchors and aliases"):
        config_from_mapping({"source": "/m"}, overrides=[f"evaluation.data={ALIAS_BOMB}"])
    with pytest.raises(ConfigError, match="anchors and aliases"):  # the dict form, too
        config_from_mapping({"source": "/m"}, overrides={"evaluation.data": ALIAS_BOMB})
    assert time.monotonic() - started < 5


def test_an_alias_bomb_in_a_config_file_is_refused_without_expanding_it(tmp_path):
    import time
    import tracemalloc

    path = tmp_path / "pipeline.yaml"
    path.write_text(f"source: /m\nevaluation: {{data: {ALIAS_BOMB}}}\n")
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="expands to more than 100000 values"):
            load_config(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 5 and peak < 50 * 2**20
    # an alias that repeats a value is still fine in a file
    path.write_text("source: /m\noptimize: {atol: &tolerance 0.001}\n"
                    "gate: {max_output_rel_error: *tolerance}\n")
    assert load_config(path).gate.max_output_rel_error == 0.001


def test_a_huge_bad_value_is_quoted_short_in_the_error_line():
    from tfopt.components.config.pipeline_config import ConfigError, config_from_mapping

    with pytest.raises(ConfigError) as raised:
        config_from_mapping({"source": "/m", "benchmark": {"min_seconds": "x" * 100_000}})
    line = str(raised.value)
    assert "min_seconds" in line and len(line) < 500 and "100002 characters" in line
