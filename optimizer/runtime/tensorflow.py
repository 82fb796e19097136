"""TensorFlow: a SavedModel signature, or a :class:`FrozenModel` graph, called in this process.

Thread pools are the process's (TensorFlow sizes them once, when its runtime starts; see
:mod:`optimizer.system.cpu_threads`), so ``num_threads`` cannot be set per model: a SavedModel
tuned to other pool sizes runs here with this process's, and a caller that must honour them
runs it in a process of its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from optimizer.model.frozen import FrozenModel
from optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from optimizer.model.savedmodel import DEFAULT_SIGNATURE, get_signature
from optimizer.model.signature import SignatureInfo
from optimizer.runtime.base import ModelRunner
from optimizer.tf_runtime import import_tensorflow


class TensorFlowRunner(ModelRunner):
    format = "savedmodel"
    runtime = "tensorflow"

    def to_tensors(self, feeds: Mapping[str, np.ndarray]) -> list:
        tf = import_tensorflow()
        self.check_feeds(feeds)
        return [tf.constant(np.asarray(feeds[s.key]), dtype=tf.as_dtype(s.dtype))
                for s in self.signature.inputs]

    def outputs(self, raw) -> dict[str, np.ndarray]:
        return {k: np.asarray(v.numpy()) for k, v in raw.items()}

    def bind(self, tensors: list):
        """The concrete function called with its flat inputs, bound once. A call by keyword
        matches the arguments to the function's structured signature, checks and flattens
        them on every call: ~55 us of the ~190 us the stock StringLookup classifier takes at
        batch 1 (benchmarks/string_lookup.py), more than its graph's ops take to run. The
        outputs are the same structured dict."""
        fn = self._fn
        call_flat = getattr(fn, "_call_flat", None)
        function_type = getattr(fn, "function_type", None)
        if call_flat is None or function_type is None:  # another TF's internals: plain binding
            return super().bind(tensors)
        from tensorflow.python.eager.polymorphic_function import function_type_utils

        if self._by_keyword:
            args, kwargs = (), dict(zip(self.signature.input_keys, tensors))
        else:
            args, kwargs = tuple(tensors), {}
        try:
            flat = function_type.unpack_inputs(
                function_type_utils.canonicalize_function_inputs(args, kwargs, function_type))
        except TypeError:
            if self._by_keyword:
                return super().bind(tensors)
            flat = list(tensors)  # a pruned graph function: its flat signature, as called
        captured = fn.captured_inputs
        return lambda: call_flat(flat, captured)


def _frozen_function(model: FrozenModel):
    tf = import_tensorflow()

    def _import():
        tf.compat.v1.import_graph_def(model.graph_def, name="")

    wrapped = tf.compat.v1.wrap_function(_import, [])
    graph = wrapped.graph
    feeds = [graph.get_tensor_by_name(s.tensor_name) for s in model.signature.inputs]
    fetches = {s.key: graph.get_tensor_by_name(s.tensor_name) for s in model.signature.outputs}
    return wrapped.prune(feeds, fetches)


def frozen_runner(model: FrozenModel) -> TensorFlowRunner:
    return TensorFlowRunner(model.signature, _frozen_function(model), by_keyword=False,
                            description=f"frozen graph of {model.source or 'a model'}")


def frozen_session_runner(model: FrozenModel) -> ModelRunner:
    """A runner for ``model``'s graph in a v1 Session: the graph imported once. The
    :func:`frozen_runner` (a pruned wrapped function) copies the graph into a function library
    and traces it again, holding about twice the weights more: the optimize worker's
    equivalence check (:mod:`optimizer.optimize.worker`) runs big graphs this way."""
    tf = import_tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(model.graph_def, name="")
    session = tf.compat.v1.Session(graph=graph)
    feeds = [s.tensor_name for s in model.signature.inputs]
    fetches = {s.key: s.tensor_name for s in model.signature.outputs}

    def run(*tensors):
        return session.run(fetches, dict(zip(feeds, tensors)))

    runner = SessionRunner(model.signature, run, by_keyword=False,
                           description=f"frozen graph of {model.source or 'a model'}")
    runner.session = session
    return runner


class SessionRunner(ModelRunner):
    format = "savedmodel"
    runtime = "tensorflow"

    def close(self) -> None:
        super().close()
        self.session.close()


def load_runner(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                num_threads: int | None = None, policy: ScanPolicy = DEFAULT_POLICY
                ) -> TensorFlowRunner:
    from optimizer.model.freeze import load_signature_function

    signature = get_signature(path, signature_name, policy=policy)
    fn = load_signature_function(path, signature_name, policy=policy)
    return TensorFlowRunner(signature, fn, by_keyword=True, description=f"SavedModel {path}")


def read_signature(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                   policy: ScanPolicy = DEFAULT_POLICY) -> SignatureInfo:
    return get_signature(path, signature_name, policy=policy)
