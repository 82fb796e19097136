"""Transform recipes: GTT's ``--transforms`` string, or a YAML list, into transforms to run.

Both spellings give the same list of :class:`TransformSpec`, whose parameters are kept the way
GTT keeps them (``TransformFuncParameters``: name -> list of string values), so one recipe can
run through this package's transforms or through TF's native Graph Transform Tool.

The string syntax is GTT's (``ParseTransformParameters`` in transform_graph.cc)::

    strip_unused_nodes(type=float, shape="1,299,299,3")
    remove_nodes(op=Identity, op=CheckNumerics)    # a repeated key accumulates values
    fold_constants(ignore_errors=true) fold_batch_norms

Whitespace, newlines and shell line continuations (``\\`` before a newline, which survive in
GTT's README recipes because they sit inside single quotes) may appear between any two tokens.
Values are bare (letters, digits and ``-._/:+*``) or quoted with ``"`` or ``'``, with ``\\``
escaping the next character. A recipe wrapped in one pair of quotes, as pasted from a shell
``--transforms='...'``, is unwrapped. Every mistake is reported on one line with its position.

The YAML spelling is a list whose items are ``fold_constants`` (a string in the syntax above),
``{name: remove_nodes, op: [Identity, CheckNumerics]}`` or ``{fold_constants: {ignore_errors:
true}}``. A recipe file is that list, or a mapping with ``transforms:`` and optionally
``tolerance: {atol, rtol, min_top1}`` and ``backend: python|native``.

As in GTT, every transform accepts ``ignore_errors``: with ``true`` a failing step is logged and
skipped, leaving the graph as it was.
"""

from __future__ import annotations

import difflib
import logging
import os
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.errors import TfoptError, shown
from optimizer.files.yaml_files import parse_yaml, read_yaml_file
from optimizer.transforms.base import Param, Transform, TransformConfigError
from optimizer.verify.tolerance import Tolerance

log = logging.getLogger(__name__)

# GTT's "Optimizing for Deployment" recipe (graph_transforms/README.md), without its
# Inception-specific ``type=float, shape="1,299,299,3"``: a frozen SavedModel signature already
# declares its inputs.
DEPLOYMENT_RECIPE = ("strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) "
                     "fold_constants(ignore_errors=true) fold_batch_norms fold_old_batch_norms")
# The deployment recipe, then merging the constants and subgraphs that folding made identical:
# every step one that TF's native Graph Transform Tool also has (``--backend native``).
GTT_INFERENCE_RECIPE = f"{DEPLOYMENT_RECIPE} merge_duplicate_nodes"
# The default recipe: GTT's, with exact GELU written the way TensorFlow's remapper fuses it into
# the matrix product before it (Keras writes it with Erfc, which nothing fuses).
INFERENCE_RECIPE = f"{DEPLOYMENT_RECIPE} rewrite_gelu_erf flatten_dense_matmuls merge_duplicate_nodes"
# For recurrent models over a fixed sequence length: their loops unrolled first, so that the
# inference recipe's folding and merging reach every step (benchmarks/recurrent.py).
RECURRENT_RECIPE = f"unroll_static_loops {INFERENCE_RECIPE}"
# GTT's "Eight-bit Calculations" recipe, without ``add_default_attributes``: freezing with the
# running TensorFlow already fills in every default attribute.
EIGHT_BIT_RECIPE = ("strip_unused_nodes remove_nodes(op=Identity, op=CheckNumerics) "
                    "fold_old_batch_norms quantize_weights quantize_nodes strip_unused_nodes")
# GTT's "Shrinking File Size" recipe: weights stored as eight bits, computation in float.
SHRINK_WEIGHTS_RECIPE = "quantize_weights"

def default_recipe(backend: str = "python") -> str:
    """The recipe used when none is given: the inference recipe, or GTT's own for the native
    backend, whose C++ tool has none of this package's own transforms."""
    return GTT_INFERENCE_RECIPE if backend == "native" else INFERENCE_RECIPE


RECIPES = {
    "deployment": DEPLOYMENT_RECIPE,
    "inference": INFERENCE_RECIPE,
    "gtt_inference": GTT_INFERENCE_RECIPE,
    "recurrent": RECURRENT_RECIPE,
    "eight_bit": EIGHT_BIT_RECIPE,
    "shrink_weights": SHRINK_WEIGHTS_RECIPE,
}

BACKENDS = ("python", "native")
RECIPE_FILE_KEYS = ("transforms", "tolerance", "backend")

_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_")
# GTT's LETTER_DIGIT_DASH_DOT_SLASH_UNDERSCORE; values outside it are quoted when formatting.
_GTT_BARE_VALUE_CHARS = _NAME_CHARS | frozenset("-./")
_BARE_VALUE_CHARS = _GTT_BARE_VALUE_CHARS | frozenset(":+*")
_QUOTES = "\"'"

IGNORE_ERRORS = Param("ignore_errors", bool, False,
                      "GTT: log a failure of this transform and skip it instead of stopping")


class RecipeSyntaxError(TransformConfigError):
    """A recipe that cannot be read: bad GTT syntax or a malformed YAML item."""


class RecipeFileError(TfoptError):
    """A recipe file that is missing, unreadable, not YAML, or has an unknown key."""


@dataclass(frozen=True)
class TransformSpec:
    """One step of a recipe before it is built: a transform name and GTT-style parameters."""

    name: str
    params: dict[str, list[str]] = field(default_factory=dict)

    def to_gtt(self) -> str:
        """This step in GTT syntax, quoted so that GTT's own parser reads it back the same."""
        if not self.params:
            return self.name
        args = ", ".join(f"{key}={_gtt_value(v)}" for key, values in self.params.items()
                         for v in values)
        return f"{self.name}({args})"


def _gtt_value(value: str) -> str:
    if value and set(value) <= _GTT_BARE_VALUE_CHARS:
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_transforms(specs: Iterable[TransformSpec]) -> str:
    return " ".join(spec.to_gtt() for spec in specs)


@dataclass(frozen=True)
class Recipe:
    """Transforms to apply, and optionally the tolerance and backend a recipe file asks for."""

    transforms: tuple[TransformSpec, ...]
    tolerance: Tolerance | None = None
    backend: str | None = None
    source: str = ""  # where the recipe came from, for messages

    @classmethod
    def from_string(cls, text: str, source: str = "--transforms") -> Recipe:
        return cls(tuple(parse_transforms(text)), source=source)

    @property
    def text(self) -> str:
        return format_transforms(self.transforms)


# ---------------------------------------------------------------------------------------------
# GTT string syntax


class _GttParser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.end = len(text)
        self._unwrap_shell_quotes()

    def _unwrap_shell_quotes(self) -> None:
        stripped = self.text.strip()
        if len(stripped) >= 2 and stripped[0] in _QUOTES and stripped[-1] == stripped[0]:
            self.pos = self.text.index(stripped[0]) + 1
            self.end = self.text.rindex(stripped[0])

    def where(self, pos: int) -> str:
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return f"column {column}" if "\n" not in self.text else f"line {line}, column {column}"

    def error(self, expected: str, pos: int | None = None, hint: str = "") -> RecipeSyntaxError:
        pos = self.pos if pos is None else pos
        if pos >= self.end:
            found = "the end of the recipe"
        else:
            found = repr(self.text[pos:self.end].split("\n")[0][:20])
        return RecipeSyntaxError(f"recipe syntax error at {self.where(pos)}: expected "
                                 f"{expected}, found {found}{hint}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < self.end else ""

    def skip_space(self) -> None:
        while self.pos < self.end:
            if self.text[self.pos].isspace():
                self.pos += 1
            elif self.text.startswith("\\\n", self.pos):
                self.pos += 2
            elif self.text.startswith("\\\r\n", self.pos):
                self.pos += 3
            else:
                break

    def identifier(self, what: str) -> str:
        start = self.pos
        while self.pos < self.end and self.text[self.pos] in _NAME_CHARS:
            self.pos += 1
        if self.pos == start:
            raise self.error(what)
        return self.text[start:self.pos]

    def value(self) -> str:
        quote = self.peek()
        if quote and quote in _QUOTES:
            opened = self.pos
            self.pos += 1
            chars = []
            while self.pos < self.end and self.text[self.pos] != quote:
                if self.text[self.pos] == "\\" and self.pos + 1 < self.end:
                    self.pos += 1
                chars.append(self.text[self.pos])
                self.pos += 1
            if self.pos >= self.end:
                raise self.error(f"a closing {quote} for the value opened at "
                                 f"{self.where(opened)}")
            self.pos += 1
            return "".join(chars)
        start = self.pos
        while self.pos < self.end and self.text[self.pos] in _BARE_VALUE_CHARS:
            self.pos += 1
        if self.pos == start:
            raise self.error("a parameter value (quote it if it holds other characters)")
        return self.text[start:self.pos]

    def parameters(self, transform: str, opened: int) -> dict[str, list[str]]:
        params: dict[str, list[str]] = {}
        while True:
            self.skip_space()
            if self.pos >= self.end:
                raise self.error(f"')' to close the parameters of {transform} opened at "
                                 f"{self.where(opened)}")
            if self.peek() == ")":
                self.pos += 1
                return params
            key = self.identifier(f"a parameter name or ')' in {transform}(...)")
            self.skip_space()
            if self.peek() != "=":
                hint = (" (a value with commas needs quotes, e.g. shape=\"1,299,299,3\")"
                        if key[0].isdigit() else "")
                raise self.error(f"'=' after parameter '{key}' of {transform}", hint=hint)
            self.pos += 1
            self.skip_space()
            params.setdefault(key, []).append(self.value())
            self.skip_space()
            if self.peek() == ",":
                self.pos += 1

    def parse(self) -> list[TransformSpec]:
        specs = []
        while True:
            self.skip_space()
            if self.pos >= self.end:
                return specs
            name = self.identifier("a transform name")
            self.skip_space()
            params = {}
            if self.peek() == "(":
                opened = self.pos
                self.pos += 1
                params = self.parameters(name, opened)
            specs.append(TransformSpec(name, params))


def parse_transforms(text: str) -> list[TransformSpec]:
    """GTT's ``--transforms`` string -> specs, in order. Whitespace alone gives ``[]``."""
    return _GttParser(text).parse()


# ---------------------------------------------------------------------------------------------
# YAML spelling


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
        if not key or not set(key) <= _NAME_CHARS:
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
    if not name or not set(name) <= _NAME_CHARS:
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


# ---------------------------------------------------------------------------------------------
# Building


def _did_you_mean(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


class IgnoringErrors(Transform):
    """GTT's ``ignore_errors=true`` for a transform that does not declare it: a failure is
    logged and the step is skipped, the graph passing through unchanged."""

    def __init__(self, inner: Transform):
        self.inner = inner
        self.name = inner.name
        self.values = dict(inner.values, ignore_errors=True)

    def describe(self) -> str:
        inner = self.inner.describe()
        if inner.endswith(")"):
            return f"{inner[:-1]}, ignore_errors=true)"
        return f"{inner}(ignore_errors=true)"

    def __call__(self, graph_def, context):
        try:
            return self.inner(graph_def, context)
        except Exception as exc:  # noqa: BLE001 - what ignore_errors=true asks for
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            log.warning("%s failed and is skipped (ignore_errors=true): %s: %s",
                        self.inner.describe(), type(exc).__name__, reason)
            return graph_def


def build_transform(spec: TransformSpec) -> Transform:
    from optimizer.transforms import registry

    valid = registry.transform_names()
    if spec.name not in valid:
        raise TransformConfigError(f"unknown transform '{spec.name}'"
                                   f"{_did_you_mean(spec.name, valid)}; valid: "
                                   f"{', '.join(valid)}")
    cls = registry.transform_class(spec.name)
    declared = [p.name for p in cls.params]
    accepted = declared + ([IGNORE_ERRORS.name] if IGNORE_ERRORS.name not in declared else [])
    unknown = [key for key in spec.params if key not in accepted]
    if unknown:
        raise TransformConfigError(
            f"{spec.name}: unknown parameter '{unknown[0]}'"
            f"{_did_you_mean(unknown[0], accepted)}; valid: {', '.join(accepted)}")
    values = dict(spec.params)
    ignore_errors = False
    if IGNORE_ERRORS.name not in declared and IGNORE_ERRORS.name in values:
        ignore_errors = IGNORE_ERRORS.parse(spec.name, list(values.pop(IGNORE_ERRORS.name)))
    transform = cls(**values)
    return IgnoringErrors(transform) if ignore_errors else transform


def build_transforms(specs: Iterable[TransformSpec]) -> list[Transform]:
    """Specs -> transforms, failing on the first unknown name or parameter before any runs."""
    return [build_transform(spec) for spec in specs]
