"""Fuzzing the pipeline config: every YAML file, override and trigger conf either loads or is a
one-line ConfigError (a TfoptError); nothing else escapes.

Entry points as the users reach them: ``load_config`` (a YAML file, as ``tfopt run --config``
and the DAG read it), ``--set key=value`` and dict overrides (``dag_run.conf``), and the CLI's
``--conf`` JSON (``load_config_from_args``).
"""

import argparse
import json
from pathlib import Path

import pytest
import yaml
from fuzzing import (
    FUZZ,
    YAML_CORNERS,
    mutated,
    parses_or_fails_cleanly,
    plain_data,
    scalars,
    yaml_text,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tfopt.components.cli.run_command import load_config_from_args
from tfopt.components.config.pipeline_config import (
    ConfigError,
    PipelineConfig,
    config_from_mapping,
    load_config,
)

DAG_CONFIG = Path(__file__).resolve().parent.parent / "dags" / "model_optimization.yaml"
FULL = PipelineConfig(source="s3://bucket/models/m").model_dump(mode="json")


def _dotted_keys(model, prefix=""):
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from _dotted_keys(field.annotation, f"{prefix}{name}.")
        else:
            yield prefix + name


DOTTED = sorted(_dotted_keys(PipelineConfig))
NAMES = sorted({part for key in DOTTED for part in key.split(".")})
config_keys = st.one_of(st.sampled_from(NAMES), st.text(max_size=8))
# A trigger's conf values, as JSON gives them (Airflow's Params allow these types).
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
              st.text(max_size=12)),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.text(max_size=6), children, max_size=3)),
    max_leaves=8)


@st.composite
def config_like(draw):
    """A mapping shaped like the config: real section and key names, random values."""
    doc = {}
    for key in draw(st.lists(config_keys, max_size=6)):
        if key in FULL and isinstance(FULL[key], dict) and draw(st.booleans()):
            doc[key] = draw(st.dictionaries(config_keys, plain_data(config_keys), max_size=4))
        else:
            doc[key] = draw(plain_data(config_keys))
    return doc


@st.composite
def mutated_full_config(draw):
    """The complete default config with a few keys deleted, retyped or added."""
    doc = json.loads(json.dumps(FULL))
    for _ in range(draw(st.integers(1, 3))):
        node = doc
        while True:
            keys = sorted(node)
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            if isinstance(node[key], dict) and node[key] and draw(st.booleans()):
                node = node[key]
                continue
            action = draw(st.sampled_from(["delete", "retype", "add"]))
            if action == "delete":
                del node[key]
            elif action == "retype":
                node[key] = draw(plain_data(config_keys))
            else:
                node[draw(config_keys)] = draw(scalars)
            break
    return doc


@st.composite
def config_text_with_corners(draw):
    """A valid config in block style with YAML corners as the values of real keys."""
    lines = ["source: s3://bucket/models/m"]
    for _ in range(draw(st.integers(1, 3))):
        *sections, leaf = draw(st.sampled_from(DOTTED)).split(".")
        for depth, section in enumerate(sections):
            lines.append("  " * depth + f"{section}:")
        indent = "  " * len(sections)
        corner = draw(st.sampled_from(YAML_CORNERS)).replace("\n", "\n" + indent + "  ")
        lines.append(f"{indent}{leaf}: {corner}")
    return "\n".join(lines) + "\n"


def _load_text(tmp_path_factory, text: str):
    path = tmp_path_factory.mktemp("fuzz") / "pipeline.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return parses_or_fails_cleanly(load_config, path)


@settings(FUZZ, max_examples=100)
@given(doc=st.one_of(config_like(), plain_data(config_keys)))
def test_any_yaml_document_loads_or_is_a_config_error(tmp_path_factory, doc):
    _load_text(tmp_path_factory, yaml.safe_dump(doc, allow_unicode=True))
    parses_or_fails_cleanly(config_from_mapping, doc)


@settings(FUZZ, max_examples=150)
@given(doc=mutated_full_config())
def test_a_valid_config_with_a_few_keys_broken_loads_or_is_a_config_error(doc):
    config = parses_or_fails_cleanly(config_from_mapping, doc)
    if config is not None:
        assert isinstance(config, PipelineConfig)


@settings(FUZZ, max_examples=150)
@given(text=st.one_of(mutated(DAG_CONFIG.read_text()), mutated(yaml.safe_dump(FULL)),
                      yaml_text(config_like()), config_text_with_corners(),
                      st.sampled_from(YAML_CORNERS),
                      st.text(max_size=60)))
def test_any_config_file_text_loads_or_is_a_config_error(tmp_path_factory, text):
    _load_text(tmp_path_factory, text)


override_values = st.one_of(
    st.text(max_size=20), st.sampled_from(YAML_CORNERS),
    plain_data().map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()))
set_arguments = st.builds(lambda key, sep, value: f"{key}{sep}{value}",
                          st.one_of(st.sampled_from(DOTTED), st.text(max_size=12),
                                    st.sampled_from(["", ".", "a..b", "source.x", "gate."])),
                          st.sampled_from(["=", "=", ""]), override_values)


@settings(FUZZ, max_examples=200)
@given(overrides=st.lists(set_arguments, max_size=4))
def test_any_set_override_applies_or_is_a_config_error(overrides):
    parses_or_fails_cleanly(load_config, DAG_CONFIG, overrides)


@settings(FUZZ, max_examples=200)
@given(overrides=st.dictionaries(st.one_of(st.sampled_from(DOTTED), st.text(max_size=10)),
                                 json_values, max_size=4))
def test_any_trigger_conf_override_applies_or_is_a_config_error(overrides):
    parses_or_fails_cleanly(load_config, DAG_CONFIG, overrides)


ALLOWING = ("source: s3://bucket/models/m\n"
            "triggers: {allow_overrides: [gate.min_speedup, tuning, optimize.recipe]}\n")
trigger_payloads = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={
        "source": st.one_of(json_values, st.sampled_from(YAML_CORNERS)),
        "evaluation_data": json_values,
        "overrides": st.one_of(json_values, st.dictionaries(
            st.one_of(st.sampled_from(DOTTED), st.text(max_size=10)),
            st.one_of(json_values, st.sampled_from(YAML_CORNERS)), max_size=4))}))


@settings(FUZZ, max_examples=200)
@given(extra=trigger_payloads, conf=trigger_payloads)
def test_any_trigger_loads_only_what_the_yaml_allows_or_is_a_config_error(tmp_path_factory,
                                                                          extra, conf):
    from tfopt.components.config import trigger_conf

    path = tmp_path_factory.mktemp("fuzz") / "pipeline.yaml"
    path.write_text(ALLOWING)
    config = parses_or_fails_cleanly(load_config, path,
                                     triggers=[trigger_conf.event(extra), trigger_conf.conf(conf)])
    if config is not None:  # whatever a trigger sent, nothing it may not set has changed
        defaults = PipelineConfig(source="s3://bucket/models/m").model_dump(mode="json")
        loaded = config.model_dump(mode="json")
        for section in ("security", "mlflow", "s3", "workdir", "resources", "execution",
                        "schedule", "benchmark", "evaluation.metric", "signature"):
            *parents, leaf = section.split(".")
            assert _at(loaded, parents)[leaf] == _at(defaults, parents)[leaf], section
        gate = {k: v for k, v in loaded["gate"].items() if k != "min_speedup"}
        assert gate == {k: v for k, v in defaults["gate"].items() if k != "min_speedup"}


def _at(data: dict, keys: list[str]) -> dict:
    for key in keys:
        data = data[key]
    return data


conf_texts = st.one_of(
    st.fixed_dictionaries({}, optional={"source": json_values, "overrides": json_values})
      .map(json.dumps),
    json_values.map(json.dumps), st.text(max_size=30))


@settings(FUZZ, max_examples=200)
@given(conf=conf_texts, overrides=st.lists(set_arguments, max_size=2))
def test_any_cli_conf_json_applies_or_is_a_config_error(conf, overrides):
    args = argparse.Namespace(config=str(DAG_CONFIG), overrides=overrides, conf=conf)
    parses_or_fails_cleanly(load_config_from_args, args)


def test_the_fuzz_targets_do_load_valid_configs():
    """The property is not vacuous: the unmutated inputs load."""
    assert load_config(DAG_CONFIG).source
    assert config_from_mapping(FULL).source == "s3://bucket/models/m"
    assert isinstance(load_config(DAG_CONFIG, ["gate.min_speedup=1.2"]), PipelineConfig)
    try:
        load_config(DAG_CONFIG, ["gate.min_speedup=fast"])
    except ConfigError as exc:
        assert "gate.min_speedup" in str(exc)


# Each crashed (a traceback) or broke its message over lines before the fixes in
# components/config/pipeline_config.py, components/cli/run_command.py and optimizer/files/yaml_files.py; found by the
# tests above or by probing YAML's corners (YAML_CORNERS) while writing them.
REGRESSIONS = [
    ("source: &a [*a]\n", [], "not plain data (Circular reference detected)"),
    ("source: 2024-01-01\n", [], "not plain data (Object of type date"),
    ("source: x\nschedule: {cron: !!set {a, b}}\n", [], "Object of type set"),
    ("source: !!binary aGVsbG8=\n", [], "Object of type bytes"),
    ("source: x\n2024-01-01: y\n", [], "keys must be str"),
    ("[" * 1000 + "]" * 1000 + "\n", [], "invalid YAML: nested too deeply"),
    ("source: x\n", ["gate.min_speedup=" + "[" * 1000], "nested too deeply"),
    ("source: x\n", ["gate.min_speedup=&a [*a]"], "anchors and aliases (& and *) are not allowed"),
    ("source: x\n", ["benchmark.batch_sizes\r"], "--set takes key=value, got "),
    ("source: x\n", ["source.x\r=1"], "'source' is not a section"),
    ("source: x\n", ["a\n.b=1"], "unknown key 'a\\n'"),
    ('source: x\n"\\r": 1\n', [], "unknown key '\\r'"),
    ("!!float nan# a comment\n", [], "invalid YAML: could not convert string to float"),
]


@pytest.mark.parametrize("text, overrides, message", REGRESSIONS)
def test_found_by_fuzzing_a_config_that_crashed_is_now_a_one_line_error(tmp_path, text,
                                                                        overrides, message):
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides)
    assert message in str(caught.value)
    assert parses_or_fails_cleanly(load_config, path, overrides) is None


def test_found_by_fuzzing_a_conf_whose_overrides_are_not_a_mapping_is_a_config_error():
    for conf in ('{"overrides": [1, 2]}', '{"overrides": "gate.min_speedup=2"}'):
        args = argparse.Namespace(config=str(DAG_CONFIG), overrides=[], conf=conf)
        with pytest.raises(ConfigError, match='"overrides" must be a JSON object'):
            load_config_from_args(args)
