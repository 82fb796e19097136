"""The fixed routine every graph transform shares; a transform writes only ``transform``.

A transform is a pure ``GraphDef -> GraphDef`` function: it receives a private copy of the
graph, returns a new graph, keeps the name of any node it replaces (so nothing downstream needs
rewiring), and leaves a pattern that does not match untouched (logged at debug level). The base
class validates the graph before and after, and logs the op-count delta.

Functional control flow (:mod:`tfopt.optimizer.graph.functional_control_flow`): a transform sees a
While/If as one node of the main graph and its cond and body as library functions. Unless it
says it rewrites function bodies (``rewrites_function_bodies``), the base class warns once that
those are left as they are; and a library function whose body a transform did change gets a
name of its own, so that the result loads beside the original in one process.
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.graph.functional_control_flow import (
    describe_functional_nodes,
    rename_changed_functions,
)
from tfopt.optimizer.graph.validate import validate_graph

log = logging.getLogger("tfopt.optimizer.transforms")


class TransformConfigError(TfoptError):
    """Unknown transform, unknown parameter or bad parameter value."""


class TransformRefused(TfoptError):
    """A transform declined to run for a stated, measured reason (e.g. it would be slower)."""


@dataclass(frozen=True)
class Param:
    """One declared parameter: the schema that validates user config."""

    name: str
    type: type  # bool, int, float, str
    default: Any = None
    description: str = ""
    repeated: bool = False  # GTT allows ``op=Identity, op=CheckNumerics``

    def parse(self, transform: str, values: list) -> Any:
        if not self.repeated and len(values) > 1:
            raise TransformConfigError(
                f"{transform}: parameter '{self.name}' takes one value, got {len(values)}")
        parsed = [self._parse_one(transform, v) for v in values]
        return parsed if self.repeated else parsed[0]

    def _parse_one(self, transform: str, value: Any) -> Any:
        if isinstance(value, self.type) and not (self.type is int and isinstance(value, bool)):
            return value
        text = str(value).strip()
        try:
            if self.type is bool:
                lowered = text.lower()
                if lowered in ("true", "1", "yes"):
                    return True
                if lowered in ("false", "0", "no"):
                    return False
                raise ValueError(text)
            return self.type(text)
        except ValueError:
            raise TransformConfigError(
                f"{transform}: parameter '{self.name}' expects {self.type.__name__}, "
                f"got {value!r}") from None


@dataclass(frozen=True)
class TransformContext:
    """What GTT calls TransformFuncContext: the graph's inputs and outputs, by node name."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    protected_names: frozenset[str] = field(default_factory=frozenset)

    @property
    def boundary(self) -> frozenset[str]:
        """Nodes no transform may remove or rename: inputs, outputs and protected nodes."""
        return frozenset(self.input_names) | frozenset(self.output_names) | self.protected_names


class Transform:
    """Subclasses set ``name``, ``params`` and a docstring, and implement ``transform``."""

    name: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    # True for a transform that works inside library functions (loop bodies, cond branches)
    # or on While/If nodes themselves; the others rewrite the main graph only.
    rewrites_function_bodies: ClassVar[bool] = False

    def __init__(self, **values: Any):
        declared = {p.name: p for p in self.params}
        unknown = sorted(set(values) - set(declared))
        if unknown:
            valid = ", ".join(declared) or "none"
            raise TransformConfigError(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)}; valid: {valid}")
        self.values: dict[str, Any] = {}
        for param in self.params:
            if param.name in values:
                raw = values[param.name]
                raw_list = list(raw) if isinstance(raw, (list, tuple)) else [raw]
                self.values[param.name] = param.parse(self.name, raw_list)
            else:
                default = param.default
                self.values[param.name] = list(default) if isinstance(default, (list, tuple)) \
                    else default

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def describe(self) -> str:
        args = []
        for param in self.params:
            value, default = self.values[param.name], param.default
            if value != (list(default) if isinstance(default, (list, tuple)) else default):
                for v in value if param.repeated else [value]:
                    args.append(f"{param.name}={str(v).lower() if isinstance(v, bool) else v}")
        return f"{self.name}({', '.join(args)})" if args else self.name

    def transform(self, graph_def, context: TransformContext):
        raise NotImplementedError

    def __call__(self, graph_def, context: TransformContext):
        from tensorflow.core.framework import graph_pb2

        validate_graph(graph_def, f"graph before {self.name}")
        functional = describe_functional_nodes(graph_def)
        if functional and not self.rewrites_function_bodies:
            log.warning("%s: leaves %s node(s) and the loop bodies and branches they call "
                        "as they are (it rewrites the main graph only)", self.describe(),
                        functional)
        private = graph_pb2.GraphDef()
        private.CopyFrom(graph_def)
        started = time.perf_counter()
        result = self.transform(private, context)
        renamed = rename_changed_functions(graph_def, result)
        if renamed:
            log.debug("%s: rewrote %d library function(s), renamed: %s", self.name,
                      len(renamed), ", ".join(renamed.values()))
        validate_graph(result, f"graph after {self.name}")
        before = collections.Counter(n.op for n in graph_def.node)
        after = collections.Counter(n.op for n in result.node)
        delta = {op: after[op] - before[op] for op in before | after if after[op] != before[op]}
        log.info("%s: %d -> %d nodes in %.2fs %s", self.describe(), len(graph_def.node),
                 len(result.node), time.perf_counter() - started,
                 " ".join(f"{op}{d:+d}" for op, d in sorted(delta.items())))
        return result
