"""Hypothesis strategies and the one property the fuzz tests share.

The property: an input either parses or raises a :class:`TfoptError` whose message is one line;
any other exception is a bug. Inputs are mostly near-valid (valid documents with a few
mutations, YAML built from real keys, tokens of the real grammar) with some garbage, and YAML's
sharp corners mixed in: anchors that make a document refer to itself, dates, sets, binary,
Python tags, deep nesting, control characters.

Settings are derandomized so that CI sees the same examples every run.
"""

from __future__ import annotations

import itertools

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tfopt.optimizer.errors import TfoptError

FUZZ = settings(derandomize=True, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

# YAML that safe_load reads into something other than plain str/number/list/dict, or refuses.
YAML_CORNERS = [
    "&a [*a]", "&m {k: *m}", "*undefined", "2024-01-01", "2024-01-01 10:00:00", "!!set {a, b}",
    "!!binary aGVsbG8=", "!!python/object/apply:os.system [true]", "!!str 1", "!!float nan",
    ".inf", "-.inf", ".nan", "0x1F", "0o17", "1_000", "1e400", "~", "null", "yes", "off",
    "? [a, b]\n: c", "? {a: 1}\n: c", "- " * 1000 + "x",
    "[" * 1000 + "]" * 1000, "{a: " * 600 + "1" + "}" * 600, "'unterminated", "\"\\x\"",
    "a: b: c", "--- a\n--- b", "%YAML 9.9\n---",
    "\x00", "\t- x", "\x85", "\u2028", "\ufeffa: 1", "@reserved", "`tick", "|\n  block\n",
    ">-\n folded\n", "key: &anchor\n  - 1\nother: *anchor", "<<: {a: 1}", "!!merge <<: 1",
]

# What str.splitlines() splits on: a terminal or a log line would break at any of them.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                    st.sampled_from(["", "true", "1e-4", "nan", "s3://b/k", "models:/m@a",
                                     "a\nb", "\r", "x" * 300]))


def plain_data(keys=None, max_leaves: int = 12):
    """Nested lists and mappings of scalars, as YAML or JSON would give them."""
    keys = st.text(max_size=10) if keys is None else keys
    return st.recursive(scalars, lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
        max_leaves=max_leaves)


def yaml_text(documents) -> st.SearchStrategy[str]:
    """``documents`` dumped as YAML, flow or block style."""
    return st.tuples(documents, st.booleans()).map(
        lambda pair: yaml.safe_dump(pair[0], default_flow_style=pair[1], allow_unicode=True))


@st.composite
def mutated(draw, text: str, max_edits: int = 4) -> str:
    """``text`` with a few edits: a character or a YAML corner inserted, a slice cut or copied."""
    for _ in range(draw(st.integers(1, max_edits))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "corner", "delete", "duplicate", "replace"]))
        if kind == "insert":
            text = text[:at] + draw(st.text(min_size=1, max_size=3)) + text[at:]
        elif kind == "corner":
            text = text[:at] + draw(st.sampled_from(YAML_CORNERS)) + text[at:]
        elif kind == "replace" and at < len(text):
            text = text[:at] + draw(st.sampled_from(":-[]{},&*!|>'\"#%@\n\t ")) + text[at + 1:]
        else:
            end = draw(st.integers(at, min(len(text), at + 40)))
            text = text[:at] + (text[at:end] * 2 if kind == "duplicate" else "") + text[end:]
    return text


def parses_or_fails_cleanly(function, *args, **kwargs):
    """``function(...)``'s result, or None after a TfoptError with a one-line message."""
    try:
        return function(*args, **kwargs)
    except TfoptError as exc:
        message = str(exc)
        assert message.strip(), f"{type(exc).__name__} with an empty message"
        breaks = [c for c in LINE_BREAKS if c in message]
        assert not breaks, f"{type(exc).__name__} breaks lines at {breaks}: {message!r}"
        return None


def alias_bomb(levels: int) -> str:
    """YAML of nested aliases: 9**levels strings once expanded, from ~32 characters a level (a
    "billion laughs" at 9 levels; tests/test_triggers.py runs that one under a memory limit)."""
    names = "abcdefghijklmnop"[:levels]
    return "[" + ", ".join(
        ["&a [x,x,x,x,x,x,x,x,x]"]
        + [f"&{name} [" + ",".join([f"*{before}"] * 9) + "]"
           for before, name in itertools.pairwise(names)]) + "]"
