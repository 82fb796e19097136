"""Test-only transforms for ``tfopt optimize``: one that changes the numbers, one that refuses.

Registered per test with ``monkeypatch`` (see ``test_optimize_command.py``); never in the real
registry.
"""

from __future__ import annotations

from tfopt.optimizer.transforms.base import Param, Transform, TransformContext, TransformRefused


class PerturbWeights(Transform):
    """Adds ``amount`` to every element of the largest float32 Const: a model that is wrong."""

    name = "perturb_weights"
    params = (Param("amount", float, 0.5, "added to every weight of the largest Const"),)

    def transform(self, graph_def, context: TransformContext):
        from tensorflow.python.framework import tensor_util

        weights = [n for n in graph_def.node
                   if n.op == "Const" and n.attr["dtype"].type == 1]  # DT_FLOAT
        largest = max(weights, key=lambda n: tensor_util.MakeNdarray(n.attr["value"].tensor).size)
        values = tensor_util.MakeNdarray(largest.attr["value"].tensor) + self["amount"]
        largest.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(values))
        return graph_def


class RefuseAlways(Transform):
    """Refuses the way a transform does when it measures that it would not help."""

    name = "refuse_always"

    def transform(self, graph_def, context: TransformContext):
        raise TransformRefused("refuse_always: measured 1.8x slower than the original, refused")
