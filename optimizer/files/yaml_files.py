"""Reading YAML the one safe way: ``yaml.safe_load`` (no Python tags, no code), one-line errors.

Every YAML file the project reads (recipes, gate configs, the pipeline config) goes through
here, so a missing file, a directory, unreadable bytes or a syntax error read the same way,
with the position of the error when YAML knows it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tfopt.optimizer.errors import TfoptError, shown


def parse_yaml(text: str, where: str, error: type[TfoptError]) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise error(f"{where}: invalid YAML{at}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise error(f"{where}: invalid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise error(f"{where}: invalid YAML: nested too deeply") from None
    except (ValueError, TypeError) as exc:  # a tag PyYAML cannot build, e.g. "!!float nan#x"
        raise error(f"{where}: invalid YAML: {shown(str(exc).splitlines()[0])}") from None


def read_yaml_file(path: str | os.PathLike, what: str, error: type[TfoptError]) -> Any:
    """``what`` names the file for messages, e.g. ``"recipe file"`` -> "no such recipe file"."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise error(f"no such {what}: {path}") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise error(f"cannot read {what} {path}: {reason}") from None
    return parse_yaml(text, str(path), error)
