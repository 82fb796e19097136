"""The frozen model: one GraphDef with no variables, plus the signature that names its tensors.

Every optimization step takes a :class:`FrozenModel` and returns a new one; the signature's
keys, dtypes and shapes never change, only the graph and the tensor names behind the keys.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, replace

from tfopt.optimizer.model.signature import SignatureInfo


@dataclass(frozen=True)
class FrozenModel:
    graph_def: object  # tensorflow.core.framework.graph_pb2.GraphDef
    signature: SignatureInfo
    source: str = ""
    history: tuple[str, ...] = field(default=())

    def with_graph(self, graph_def, step: str | None = None) -> FrozenModel:
        history = self.history + ((step,) if step else ())
        return replace(self, graph_def=graph_def, history=history)

    @property
    def input_node_names(self) -> list[str]:
        from tfopt.optimizer.graph.names import node_name_from_input

        return [node_name_from_input(s.tensor_name) for s in self.signature.inputs]

    @property
    def output_node_names(self) -> list[str]:
        from tfopt.optimizer.graph.names import node_name_from_input

        return [node_name_from_input(s.tensor_name) for s in self.signature.outputs]

    def op_counts(self) -> collections.Counter:
        from tfopt.optimizer.model.savedmodel import op_histogram

        return op_histogram(self.graph_def)

    @property
    def size_bytes(self) -> int:
        return self.graph_def.ByteSize()
