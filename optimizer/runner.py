"""Run a model in this process: a SavedModel directory, a :class:`FrozenModel` or a LiteRT
``.tflite`` file (:mod:`optimizer.litert.runner`), all with the same interface.

``runner(feeds) -> outputs`` takes and returns ``{signature key: numpy array}``, so the
equivalence check and the benchmark treat every kind of model the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Union

import numpy as np

from optimizer.errors import InvalidInputsError
from optimizer.frozen import FrozenModel
from optimizer.savedmodel import DEFAULT_SIGNATURE, get_signature
from optimizer.signature import SignatureInfo
from optimizer.tf_runtime import import_tensorflow

Model = Union[str, os.PathLike, FrozenModel, "ModelRunner"]


class ModelRunner:
    """Calls one signature. ``call`` is the hot path the benchmark times."""

    def __init__(self, signature: SignatureInfo, fn, by_keyword: bool, description: str):
        self.signature = signature
        self._fn = fn
        self._by_keyword = by_keyword
        self.description = description

    def to_tensors(self, feeds: Mapping[str, np.ndarray]) -> list:
        tf = import_tensorflow()
        missing = [k for k in self.signature.input_keys if k not in feeds]
        if missing:
            raise InvalidInputsError(
                f"inputs missing for signature '{self.signature.name}': {', '.join(missing)}")
        return [tf.constant(np.asarray(feeds[s.key]), dtype=tf.as_dtype(s.dtype))
                for s in self.signature.inputs]

    def call(self, tensors: list) -> dict:
        if self._by_keyword:
            return self._fn(**dict(zip(self.signature.input_keys, tensors)))
        return self._fn(*tensors)

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.call(self.to_tensors(feeds))
        return {k: np.asarray(v.numpy()) for k, v in outputs.items()}


def _frozen_function(model: FrozenModel):
    tf = import_tensorflow()

    def _import():
        tf.compat.v1.import_graph_def(model.graph_def, name="")

    wrapped = tf.compat.v1.wrap_function(_import, [])
    graph = wrapped.graph
    feeds = [graph.get_tensor_by_name(s.tensor_name) for s in model.signature.inputs]
    fetches = {s.key: graph.get_tensor_by_name(s.tensor_name) for s in model.signature.outputs}
    return wrapped.prune(feeds, fetches)


def load_runner(model: Model, signature_name: str = DEFAULT_SIGNATURE) -> ModelRunner:
    """A runner for a SavedModel directory, a :class:`FrozenModel` or a ``.tflite`` file."""
    if isinstance(model, ModelRunner):
        return model
    from optimizer.litert import is_litert_path

    if is_litert_path(model):
        from optimizer.litert.runner import LiteRTRunner

        return LiteRTRunner(model, signature_name)
    if isinstance(model, FrozenModel):
        return ModelRunner(model.signature, _frozen_function(model), by_keyword=False,
                           description=f"frozen graph of {model.source or 'a model'}")
    from optimizer.freeze import load_signature_function

    signature = get_signature(model, signature_name)
    fn = load_signature_function(model, signature_name)
    return ModelRunner(signature, fn, by_keyword=True, description=f"SavedModel {model}")


def read_signature(model: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE
                   ) -> SignatureInfo:
    """The signature of a SavedModel directory or a ``.tflite`` file, without running it."""
    from optimizer.litert import is_litert_path

    if is_litert_path(model):
        from optimizer.litert.runner import read_litert_signature

        return read_litert_signature(model, signature_name)
    return get_signature(model, signature_name)
