"""The README is the front page: short, linking into the docs, and every command in it works.

Each code block in README.md is preceded by a marker saying how it is checked, and a block
without one fails the test (a ```text block is a picture, not a command):

- ``<!-- readme-check: tfopt -->``: each ``tfopt ...`` line is parsed by the real CLI's parser,
  so an unknown command, option or choice fails as it would for a user;
- ``<!-- readme-check: make -->``: each ``make TARGET [VAR=value]`` line is a dry run
  (``make -n``) of the real Makefile;
- ``<!-- readme-check: config -->``: the YAML validates as a pipeline config;
- ``<!-- readme-check: airflow -->``: ``airflow dags trigger`` names the DAG and its ``--conf``
  fits the DAG's conf schema and yields a valid config;
- ``<!-- readme-check: python -->``: the code compiles and every module it imports is installed.

Inline ``tfopt ...`` and ``make ...`` in the prose are checked the same way.
"""

import ast
import importlib.util
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
MAX_BYTES = 16 * 1024

_BLOCK = re.compile(r"(?:<!-- readme-check: (?P<check>[a-z]+) -->\n)?```(?P<lang>\w*)\n"
                    r"(?P<body>.*?)\n```", re.DOTALL)
CHECKS = ("tfopt", "make", "config", "airflow", "python")


def _blocks(kind: str | None = None) -> list[str]:
    return [m["body"] for m in _BLOCK.finditer(README) if kind is None or m["check"] == kind]


def _commands(body: str, program: str) -> list[list[str]]:
    """The ``program`` command lines of a shell block, continuation lines joined, comments
    dropped, as argv lists."""
    joined = re.sub(r"\\\n\s*", " ", body)
    lines = [shlex.split(line, comments=True) for line in joined.splitlines()]
    return [argv for argv in lines if argv and argv[0] == program]


def _inline(program: str) -> list[list[str]]:
    prose = _BLOCK.sub("", README)
    # `make` alone is the tool, not a command line
    return [shlex.split(code) for code in re.findall(r"`([^`\n]+)`", prose)
            if code.split()[0] == program and len(code.split()) > 1]


def test_readme_is_a_front_page_of_at_most_16_kb():
    size = len(README.encode())
    assert size <= MAX_BYTES, f"README.md is {size} bytes, more than {MAX_BYTES}"


def test_readme_says_what_the_two_commands_do():
    # .ci/run runs `make test`: the README is where a newcomer learns both
    two = _blocks("make")[0]
    assert "make demo" in two and "make test" in two
    assert "`make demo` trains" in README and "`make test` runs" in README


def test_every_code_block_says_how_it_is_checked():
    unchecked = [m["body"].splitlines()[0] for m in _BLOCK.finditer(README)
                 if m["lang"] != "text" and m["check"] not in CHECKS]
    assert not unchecked, f"README blocks without a known readme-check marker: {unchecked}"
    for check in CHECKS:
        assert _blocks(check), f"no README block is checked as {check}"


def test_every_tfopt_command_parses_with_the_real_cli():
    from tfopt.components.cli import build_parser

    parser = build_parser()
    # the README spells options out: an abbreviation argparse would accept fails here
    for sub in [parser, *next(a for a in parser._actions if a.dest == "command").choices.values()]:
        sub.allow_abbrev = False
    commands = [argv for body in _blocks("tfopt") for argv in _commands(body, "tfopt")]
    assert len(commands) >= 4
    for argv in commands:
        try:
            args = parser.parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"README command does not parse: {shlex.join(argv)}")
        assert args.command == argv[1]


def test_every_tfopt_command_named_in_the_prose_exists_with_its_options():
    # prose names a command and maybe an option (`tfopt step`), not a whole command line
    from tfopt.components.cli import build_parser

    [commands] = [action.choices for action in build_parser()._actions
                  if getattr(action, "choices", None)]
    for argv in _inline("tfopt"):
        assert argv[1] in commands, f"README names no such command: {shlex.join(argv)}"
        options = commands[argv[1]]._option_string_actions
        unknown = [token for token in argv[2:]
                   if token.startswith("-") and token.split("=")[0] not in options]
        assert not unknown, f"{shlex.join(argv)}: no such option {unknown}"


def test_every_make_command_is_a_real_target():
    commands = [argv for body in _blocks("make") for argv in _commands(body, "make")]
    commands += _inline("make")
    assert {"demo", "test", "kfp"} <= {argv[1] for argv in commands}
    for argv in commands:
        # -n: print what would run, run nothing (the install prerequisites included)
        dry = subprocess.run(["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                             check=False, timeout=60)
        assert dry.returncode == 0, f"{shlex.join(argv)}: {dry.stderr.strip()}"


def test_the_config_example_is_a_valid_pipeline_config():
    import yaml

    from tfopt.components.config.pipeline_config import config_from_mapping

    [example] = _blocks("config")
    config = config_from_mapping(yaml.safe_load(example), "README")
    assert config.source.startswith("s3://")


def test_the_airflow_trigger_fits_the_dags_conf(monkeypatch):
    import jsonschema

    from tfopt.components.orchestration.airflow_tasks import (
        CONFIG_ENV,
        DEFAULT_CONFIG,
        PARAMS_SCHEMA,
        dag_config,
    )

    [trigger] = [argv for body in _blocks("airflow") for argv in _commands(body, "airflow")]
    assert trigger[1:4] == ["dags", "trigger", "model_optimization"]
    assert "model_optimization" in (ROOT / "dags" / "model_optimization.py").read_text()
    conf = json.loads(trigger[trigger.index("--conf") + 1])
    jsonschema.validate(conf, {"type": "object", "properties": PARAMS_SCHEMA,
                               "additionalProperties": False})
    monkeypatch.setenv(CONFIG_ENV, str(DEFAULT_CONFIG))
    config = dag_config(params=conf)
    assert config.source == conf["source"]
    assert config.gate.min_speedup == conf["overrides"]["gate.min_speedup"]


def test_python_examples_compile_and_import_installed_modules():
    for body in _blocks("python"):
        tree = ast.parse(body)
        modules = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                   for alias in node.names]
        modules += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert modules
        for module in modules:
            assert importlib.util.find_spec(module) is not None, f"{module} is not installed"


def test_links_lead_to_docs_pages_that_exist():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 15 and any(link.startswith("docs/") for link in local)
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_running_in_airflow_and_kubeflow_is_explained():
    assert "airflow dags trigger model_optimization" in README
    assert "make kfp" in README
