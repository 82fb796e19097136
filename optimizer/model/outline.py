"""A frozen model's outline: its graph without the constants' values, standing for the full
model a worker process stored in a file.

The optimize worker (``tfopt.optimizer.optimize.worker``) hands its caller outlines, so the
caller never holds the weights; :func:`full_model` reads the full model back where one is
needed (the bf16 and XLA candidates).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.model.frozen import FrozenModel


class OutlineError(TfoptError):
    """An outline's full model was never stored (a bug, not a refused model)."""

    exit_code = 1


@dataclass(frozen=True)
class OutlinedModel(FrozenModel):
    """A frozen model's graph without its constants' values (dtype and shape kept).

    ``graph_bytes`` is the full graph's size; ``stored`` the pickle of the full model and
    ``written`` its SavedModel, where the worker wrote them (None: not written)."""

    graph_bytes: int = 0
    stored: str | None = None
    written: str | None = None

    @property
    def size_bytes(self) -> int:
        return self.graph_bytes

    def __reduce__(self):
        # as the graph's bytes, read back without TensorFlow where it is not imported: the
        # step's process reads the result and starts no runtime beside its workers
        return (_outline_from_bytes, (self.graph_def.SerializeToString(), self.signature,
                                      self.source, self.history, self.graph_bytes, self.stored,
                                      self.written))


def _outline_from_bytes(graph: bytes, signature, source: str, history: tuple[str, ...],
                        graph_bytes: int, stored: str | None, written: str | None
                        ) -> OutlinedModel:
    from tfopt.optimizer.model.tf_protos import graph_def_from_bytes

    return OutlinedModel(graph_def=graph_def_from_bytes(graph), signature=signature,
                         source=source, history=history, graph_bytes=graph_bytes,
                         stored=stored, written=written)


def outline(model: FrozenModel, stored: str | None = None,
            written: str | None = None) -> OutlinedModel:
    """``model`` without its constants' values: a few KB where the weights are hundreds of MB."""
    graph = type(model.graph_def)()
    graph.versions.CopyFrom(model.graph_def.versions)
    graph.library.CopyFrom(model.graph_def.library)
    for node in model.graph_def.node:
        kept = graph.node.add(name=node.name, op=node.op, input=node.input, device=node.device)
        for key, value in node.attr.items():
            if value.HasField("tensor"):
                kept.attr[key].tensor.dtype = value.tensor.dtype
                kept.attr[key].tensor.tensor_shape.CopyFrom(value.tensor.tensor_shape)
            else:
                kept.attr[key].CopyFrom(value)
    return OutlinedModel(graph_def=graph, signature=model.signature, source=model.source,
                         history=model.history, graph_bytes=model.size_bytes, stored=stored,
                         written=written)


def full_model(model: FrozenModel) -> FrozenModel:
    """``model`` itself, or the full model an outline stands for (read from its pickle)."""
    if not isinstance(model, OutlinedModel):
        return model
    if model.stored is None:
        raise OutlineError("the optimized graph was not kept: the model was refused")
    with open(model.stored, "rb") as stored:
        return pickle.load(stored)
