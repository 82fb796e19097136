"""The YAML spelling of a recipe, and recipe files.

A YAML recipe is a list whose items are ``fold_constants`` (a string in GTT's syntax,
:mod:`tfopt.optimizer.optimize.gtt_syntax`), ``{name: remove_nodes, op: [Identity, CheckNumerics]}`` or
``{fold_constants: {ignore_errors: true}}``. A recipe file is that list, or a mapping with
``transforms:`` and optionally ``tolerance: {atol, rtol, min_top1}`` and
``backend: python|native``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tfopt.optimizer.errors import TfoptError, shown
from tfopt.optimizer.files.yaml_files import parse_yaml, read_yaml_file
from tfopt.optimizer.optimize.gtt_syntax import (
    NAME_CHARS,
    RecipeSyntaxError,
    TransformSpec,
    parse_transforms,
)
from tfopt.optimizer.optimize.recipe import BACKENDS, RECIPE_FILE_KEYS, Recipe
from tfopt.optimizer.verify.tolerance import Tolerance


class RecipeFileError(TfoptError):
    """A recipe file that is missing, unreadable, not YAML, or has an unknown key."""



def _yaml_scalar(value: Any, where: str) -> str:
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise RecipeSyntaxError(f"{where}: expected a string, number or true/false, "
                            f"got {type(value).__name__}")


def _yaml_params(raw: Any, where: str) -> dict[str, list[str]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RecipeSyntaxError(f"{where}: parameters must be a mapping, got "
                                f"{type(raw).__name__}")
    params = {}
    for key, value in raw.items():
        key = str(key)
        if not key or not set(key) <= NAME_CHARS:
            raise RecipeSyntaxError(f"{where}: '{shown(key)}' is not a parameter name")
        values = value if isinstance(value, list) else [value]
        if not values or any(v is None for v in values):
            raise RecipeSyntaxError(f"{where}: parameter '{key}' has no value")
        params[key] = [_yaml_scalar(v, f"{where}: parameter '{key}'") for v in values]
    return params


def _spec_from_yaml_mapping(item: dict, where: str) -> TransformSpec:
    if isinstance(item.get("name"), str):
        name = item["name"]
        raw = {k: v for k, v in item.items() if k != "name"}
    elif len(item) == 1:
        ((name, raw),) = item.items()
    else:
        raise RecipeSyntaxError(
            f"{where}: a mapping item is either {{name: TRANSFORM, PARAM: VALUE, ...}} or "
            f"{{TRANSFORM: {{PARAM: VALUE, ...}}}}, got keys {', '.join(map(shown, item))}")
    name = str(name)
    if not name or not set(name) <= NAME_CHARS:
        raise RecipeSyntaxError(f"{where}: '{shown(name)}' is not a transform name")
    return TransformSpec(name, _yaml_params(raw, f"{where} ({name})"))


def specs_from_yaml(items: Any, where: str = "transforms") -> list[TransformSpec]:
    """A loaded YAML recipe (a list of items, or one GTT string) -> specs."""
    if isinstance(items, str):
        return _parse_item(items, where)
    if not isinstance(items, list):
        raise RecipeSyntaxError(f"{where} must be a list of transforms, got "
                                f"{type(items).__name__}")
    specs = []
    for number, item in enumerate(items, 1):
        item_where = f"{where} item {number}"
        if isinstance(item, str):
            specs.extend(_parse_item(item, item_where))
        elif isinstance(item, dict):
            specs.append(_spec_from_yaml_mapping(item, item_where))
        else:
            raise RecipeSyntaxError(f"{item_where}: expected a transform name or a mapping, "
                                    f"got {type(item).__name__}")
    return specs


def _parse_item(text: str, where: str) -> list[TransformSpec]:
    try:
        return parse_transforms(text)
    except RecipeSyntaxError as exc:
        raise RecipeSyntaxError(f"{where}: {exc}") from None


def parse_yaml_transforms(text: str) -> list[TransformSpec]:
    """The YAML spelling of a transform list, as text."""
    return specs_from_yaml(parse_yaml(text, "transforms", RecipeSyntaxError))


def load_recipe_file(path: str | os.PathLike) -> Recipe:
    """A YAML recipe file: a transform list, or ``{transforms, tolerance?, backend?}``."""
    path = Path(path)
    data = read_yaml_file(path, "recipe file", RecipeFileError)
    where = f"recipe file {path}"
    tolerance = backend = None
    if isinstance(data, list):
        items = data
    elif isinstance(data, dict):
        unknown = [shown(k) for k in data if k not in RECIPE_FILE_KEYS]
        if unknown:
            raise RecipeFileError(f"{where}: unknown key(s) {', '.join(unknown)}; "
                                  f"valid: {', '.join(RECIPE_FILE_KEYS)}")
        if "transforms" not in data:
            raise RecipeFileError(f"{where}: no 'transforms' list")
        items = data["transforms"]
        if data.get("tolerance") is not None:
            tolerance = Tolerance.from_mapping(data["tolerance"], f"{where}: tolerance")
        backend = data.get("backend")
        if backend is not None and backend not in BACKENDS:
            raise RecipeFileError(f"{where}: backend must be one of {', '.join(BACKENDS)}, "
                                  f"got {backend!r}")
    elif data is None:
        raise RecipeFileError(f"{where} is empty")
    else:
        raise RecipeFileError(f"{where} must hold a list of transforms or a mapping with "
                              f"'transforms', got {type(data).__name__}")
    specs = specs_from_yaml(items, f"{where}: transforms")
    if not specs:
        raise RecipeFileError(f"{where} names no transforms")
    return Recipe(tuple(specs), tolerance=tolerance, backend=backend, source=str(path))

