"""The docs site builds with warnings as errors, and its reference pages, generated from the code,
hold every command-line option, every pipeline config key and every library setting."""

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_reference = _load_generator()


def _config_field(key: str):
    from tfopt.components.config.pipeline_config import PipelineConfig

    model = PipelineConfig
    *sections, name = key.split(".")
    for section in sections:
        model = model.model_fields[section].annotation
    return model.model_fields[name]


def _row(page: str, key: str) -> str:
    rows = [line for line in page.splitlines() if line.startswith(f"| `{key}` |")]
    assert len(rows) == 1, f"{key}: {len(rows)} rows in the reference"
    return rows[0]


def test_site_builds_strictly_with_the_generated_reference(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARNING" not in result.stderr, result.stderr[-3000:]
    config_page = (site / "reference" / "config" / "index.html").read_text()
    assert "gate.min_speedup" in config_page and "optimize.time_budget_seconds" in config_page
    assert "--accuracy-budget" in (site / "reference" / "cli" / "index.html").read_text()


def test_config_reference_has_every_key_with_its_type_and_default():
    page = gen_reference.config_reference()
    keys = list(gen_reference.config_keys())
    assert len(keys) > 50 and "execution.kubernetes.image" in keys
    for key in keys:
        row = _row(page, key)
        field = _config_field(key)
        if field.is_required():
            assert "required" in row, row
        else:
            default = field.get_default(call_default_factory=True)
            if isinstance(default, str) and len(default) > 60:
                assert f"`{key}` defaults to:\n\n```text\n{default}\n```" in page
            elif isinstance(default, (int, float)) and not isinstance(default, bool):
                assert f"`{default}`" in row, row
        assert gen_reference._cell(field.description) in row, row


def test_every_config_key_says_what_it_means():
    # the reference is generated: a key without a description would be a blank cell there
    blank = [key for key in gen_reference.config_keys() if not _config_field(key).description]
    assert not blank, f"config keys without a description: {blank}"


def test_cli_reference_has_every_command_and_option():
    from tfopt.components.cli import build_parser

    page = gen_reference.cli_reference()
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(commands.choices) >= 7
    for name, sub in commands.choices.items():
        heading = f"\n### `tfopt {name}`\n"
        assert heading in page
        section = page.split(heading, 1)[1].split("\n### ", 1)[0]
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            shown = action.option_strings or [action.metavar or action.dest]
            for option in shown:
                assert f"`{option}" in section or f", {option}" in section, (name, option)


def test_settings_reference_has_every_library_setting():
    from tfopt.optimizer.benchmark.settings import BenchmarkConfig
    from tfopt.optimizer.search.settings import SearchSettings
    from tfopt.optimizer.verify.tolerance import Tolerance

    page = gen_reference.settings_reference()
    found = list(gen_reference._settings_classes())
    assert {BenchmarkConfig, SearchSettings, Tolerance} <= set(found)
    for cls in found:
        section = page.split(f"## `{cls.__name__}`", 1)[1].split("\n## ", 1)[0]
        for name in cls.model_fields:
            assert f"| `{name}` |" in section, (cls.__name__, name)


@pytest.mark.parametrize("text, expected", [
    ("a | b", "a \\| b"),
    ("two\n  lines", "two lines"),
])
def test_table_cells_stay_one_cell(text, expected):
    assert gen_reference._cell(text) == expected
