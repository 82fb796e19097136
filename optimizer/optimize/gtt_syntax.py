"""GTT's ``--transforms`` syntax: a recipe string to :class:`TransformSpec` steps, and back.

The syntax is GTT's (``ParseTransformParameters`` in transform_graph.cc)::

    strip_unused_nodes(type=float, shape="1,299,299,3")
    remove_nodes(op=Identity, op=CheckNumerics)    # a repeated key accumulates values
    fold_constants(ignore_errors=true) fold_batch_norms

Whitespace, newlines and shell line continuations (``\\`` before a newline, which survive in
GTT's README recipes because they sit inside single quotes) may appear between any two tokens.
Values are bare (letters, digits and ``-._/:+*``) or quoted with ``"`` or ``'``, with ``\\``
escaping the next character. A recipe wrapped in one pair of quotes, as pasted from a shell
``--transforms='...'``, is unwrapped. Every mistake is reported on one line with its position.

A step's parameters are kept the way GTT keeps them (``TransformFuncParameters``: name -> list
of string values), so one recipe can run through this package's transforms or through TF's
native Graph Transform Tool.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from dataclasses import dataclass, field

from tfopt.optimizer.transforms.base import TransformConfigError

NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_")
# GTT's LETTER_DIGIT_DASH_DOT_SLASH_UNDERSCORE; values outside it are quoted when formatting.
_GTT_BARE_VALUE_CHARS = NAME_CHARS | frozenset("-./")
_BARE_VALUE_CHARS = _GTT_BARE_VALUE_CHARS | frozenset(":+*")
_QUOTES = "\"'"


class RecipeSyntaxError(TransformConfigError):
    """A recipe that cannot be read: bad GTT syntax or a malformed YAML item."""


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
        while self.pos < self.end and self.text[self.pos] in NAME_CHARS:
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
