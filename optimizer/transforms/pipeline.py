"""Apply transforms in order to a :class:`FrozenModel`, keeping a trace of what each one did.

A transform that breaks the graph raises :class:`TransformFailed` naming it; the caller still
holds the model from before that step, so a failing pass is isolated without losing earlier work.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.graph.validate import InvalidGraphError
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.records import record_to_dict
from tfopt.optimizer.transforms.base import Transform, TransformContext

log = logging.getLogger(__name__)


class TransformFailed(TfoptError):
    exit_code = 4


@dataclass(frozen=True)
class TransformStep:
    """One step of a recipe's trace: the transform, and the graph's size before and after it.
    (A search's step is :class:`tfopt.optimizer.search.search.SubstitutionStep`.)"""

    transform: str
    nodes_before: int
    nodes_after: int
    op_delta: dict[str, int]
    bytes_before: int
    bytes_after: int
    seconds: float

    def to_dict(self) -> dict:
        return record_to_dict(self)


def context_for(model: FrozenModel, protected: Iterable[str] = ()) -> TransformContext:
    return TransformContext(
        input_names=tuple(model.input_node_names),
        output_names=tuple(model.output_node_names),
        protected_names=frozenset(protected),
    )


def run_transforms(
    model: FrozenModel,
    transforms: Iterable[Transform],
    protected: Iterable[str] = (),
) -> tuple[FrozenModel, list[TransformStep]]:
    context = context_for(model, protected)
    trace = []
    for transform in transforms:
        before = model.graph_def
        started = time.perf_counter()
        try:
            after = transform(before, context)
        except InvalidGraphError as exc:
            raise TransformFailed(f"{transform.describe()} produced an invalid graph: {exc}") \
                from exc
        ops_before = collections.Counter(n.op for n in before.node)
        ops_after = collections.Counter(n.op for n in after.node)
        trace.append(TransformStep(
            transform=transform.describe(),
            nodes_before=len(before.node),
            nodes_after=len(after.node),
            op_delta={op: ops_after[op] - ops_before[op]
                      for op in sorted(ops_before | ops_after) if ops_after[op] != ops_before[op]},
            bytes_before=before.ByteSize(),
            bytes_after=after.ByteSize(),
            seconds=round(time.perf_counter() - started, 4),
        ))
        model = model.with_graph(after, step=transform.describe())
    return model, trace
