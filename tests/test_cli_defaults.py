"""Every door has the same defaults: each ``tfopt`` flag that is a pipeline config key
(components/cli/settings_flags.py's CONFIG_KEYS) defaults to the config's value and says what the
config's key says; the library's own callers get the same values."""

from __future__ import annotations

import argparse
import inspect

import pytest
from pydantic import BaseModel

from tfopt.components.cli import build_parser
from tfopt.components.cli.settings_flags import CONFIG_KEYS, NOT_CONFIG_KEYS, shown_default
from tfopt.components.config.pipeline_config import PipelineConfig


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _field(dotted: str):
    model, field = PipelineConfig, None
    for name in dotted.split("."):
        field = model.model_fields[name]
        model = field.annotation
    return field


def _config_default(dotted: str):
    value = _field(dotted).get_default(call_default_factory=True)
    return tuple(value) if isinstance(value, list) else value


def _leaf_names(model=PipelineConfig) -> set[str]:
    names = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names |= _leaf_names(annotation)
        else:
            names.add(name)
    return names


def _flags():
    for command, parser in _subparsers().items():
        for action in parser._actions:
            if action.option_strings and action.dest in CONFIG_KEYS.get(command, {}):
                yield pytest.param(command, action, CONFIG_KEYS[command][action.dest],
                                   id=f"{command} {action.option_strings[0]}")


@pytest.mark.parametrize(("command", "action", "key"), list(_flags()))
def test_flag_defaults_to_its_config_key(command, action, key):
    expected = _config_default(key)
    default = tuple(action.default) if isinstance(action.default, list) else action.default
    if default is None and expected is not None:
        # None: "not given", so that a recipe file's tolerance or greedy's alpha can apply;
        # the help then names the setting's default
        assert f"default {shown_default(expected)}" in action.help or \
            f"{shown_default(expected)}, default" in action.help, (action.help, expected)
    else:
        assert default == expected, f"{command} {action.option_strings[0]}: {default!r} " \
                                    f"vs {key} {expected!r}"


@pytest.mark.parametrize(("command", "action", "key"), list(_flags()))
def test_flag_help_says_what_its_config_key_says(command, action, key):
    description = _field(key).description
    if not description or action.help is argparse.SUPPRESS:
        return
    own_words = {"signature", "allow_ops", "eval_data", "calibration_data", "backend",
                 "strategy", "memory_gb", "threads", "metric", "twin", "block_size",
                 "block_seconds", "max_seconds", "min_runs", "warmup", "cost", "min_seconds",
                 "remeasure_top", "model_call_seconds"}
    if action.dest in own_words:
        return  # written for the command's own use; the default is what must agree
    assert description.replace("%", "") in action.help.replace("%%", "%"), \
        (command, action.dest, action.help, description)


def test_every_flag_named_like_a_config_key_is_mapped_or_explained():
    leaves = _leaf_names()
    unmapped = []
    for command, parser in _subparsers().items():
        for action in parser._actions:
            if (action.option_strings and action.dest in leaves
                    and action.dest not in CONFIG_KEYS.get(command, {})
                    and action.dest not in NOT_CONFIG_KEYS.get(command, {})):
                unmapped.append(f"{command} {action.option_strings[0]}")
    assert not unmapped, f"flags named like a config key but not mapped: {unmapped}"


def test_every_mapped_key_exists_in_the_config():
    for keys in CONFIG_KEYS.values():
        for key in keys.values():
            _field(key)  # KeyError names a key that moved


def test_no_recipe_given_is_the_configs_default_recipe():
    from tfopt.optimizer.optimize.recipe import RECIPES

    assert RECIPES["inference"] == _config_default("optimize.recipe")
    recipe = next(a for a in _subparsers()["optimize"]._actions if a.dest == "recipe")
    assert "default: inference" in recipe.help


def test_library_tuning_defaults_are_the_configs():
    from tfopt.optimizer.runtime_tuning import tune_runtime
    from tfopt.optimizer.runtime_tuning.batch import measure_batch_curve
    from tfopt.optimizer.runtime_tuning.threads import search_threads

    for function in (tune_runtime, search_threads, measure_batch_curve):
        parameters = inspect.signature(function).parameters
        for name in ("rounds", "seconds_per_probe", "time_budget_seconds"):
            if name in parameters:
                assert parameters[name].default == _config_default(f"tuning.{name}"), \
                    (function.__name__, name)


def test_one_tolerance_one_confidence_one_promotion_bound():
    from tfopt.optimizer.benchmark.settings import BenchmarkConfig
    from tfopt.optimizer.gate.verdict import GateConfig
    from tfopt.optimizer.verify.equivalence import EquivalenceReport

    within = inspect.signature(EquivalenceReport.within).parameters["atol"].default
    assert within == _config_default("optimize.atol")
    assert BenchmarkConfig().confidence == GateConfig().confidence
    assert "confidence" not in PipelineConfig.model_fields["benchmark"].annotation.model_fields
    # the benchmark times on while an interval straddles the gate's bound: the same bound
    assert BenchmarkConfig().settle_speedup == _config_default("gate.min_speedup")


def test_the_old_confidence_key_is_read_as_the_gates_with_a_warning(caplog):
    from tfopt.components.config.pipeline_config import ConfigError, config_from_mapping

    config = config_from_mapping({"source": "m", "benchmark": {"confidence": 0.9}})
    assert config.gate.confidence == 0.9
    assert "benchmark.confidence is deprecated" in caplog.text
    assert "gate.confidence" in caplog.text
    with pytest.raises(ConfigError, match="give only gate.confidence"):
        config_from_mapping({"source": "m", "benchmark": {"confidence": 0.9},
                             "gate": {"confidence": 0.99}})


def test_tfopt_benchmark_times_and_decides_at_one_confidence(tmp_path):
    from tfopt.components.cli.benchmark_command import _gate_config
    from tfopt.optimizer.errors import InvalidInputsError

    gate = tmp_path / "gate.yaml"
    gate.write_text("confidence: 0.9\n")

    def level(confidence, gate_config=None):
        args = argparse.Namespace(confidence=confidence, gate_config=gate_config)
        return _gate_config(args).confidence

    assert level(None) == _config_default("gate.confidence")
    assert level(0.99) == 0.99
    assert level(None, gate) == 0.9 == level(0.9, gate)
    with pytest.raises(InvalidInputsError, match="differs from the --gate-config's"):
        level(0.99, gate)
