"""TensorFlow: a SavedModel signature, or a :class:`FrozenModel` graph, called in this process.

Thread pools are the process's (TensorFlow sizes them once, when its runtime starts; see
:mod:`tfopt.optimizer.system.cpu_threads`), so ``num_threads`` cannot be set per model: a SavedModel
tuned to other pool sizes runs here with this process's, and a caller that must honour them
runs it in a process of its own.

A SavedModel is called through the function the runtime holds for its signature
(:class:`SignatureFunction`), bound to its flat inputs once and executed without the Python a
call by keyword or ``call_flat`` adds (:meth:`SignatureFunction.bound`), the same for every
model. A frozen model's load keeps several copies of every constant (the
whole graph as a function, the signature's pruned graph, their definitions, a Python copy after
the first call); when the signature reads no variable, all but the runtime's definition are let
go before the first call (``benchmarks/load_memory.py``: a frozen MLP held 4.4x its size after
20 calls instead of 13.9x).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE, get_signature
from tfopt.optimizer.model.signature import SignatureInfo
from tfopt.optimizer.runtime.base import ModelRunner
from tfopt.optimizer.tf_runtime import import_tensorflow


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
        function_type = getattr(fn, "function_type", None)
        call_flat = fn.bound if isinstance(fn, SignatureFunction) else getattr(
            fn, "_call_flat", None)
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
        if isinstance(fn, SignatureFunction):
            return fn.bound(flat)
        captured = fn.captured_inputs
        return lambda: call_flat(flat, captured)


class SignatureFunction:
    """A loaded SavedModel's signature function, called through the function TensorFlow's
    runtime holds (by its name), without the graphs and protos that loading built.

    ``tf.saved_model.load`` of a frozen SavedModel (tfopt's optimized, bf16 and XLA ones: the
    weights are constants in the graph) keeps many copies of every constant: the whole graph
    imported as a function (its Python graph and its definition in the runtime), the
    signature's pruned graph and its definition, and, once called, a Python copy of that
    definition besides the instantiated graph's kernels. Measured for a 24 MiB frozen MLP
    (benchmarks/load_memory.py): 0.27 GiB kept after the first call, 11 copies, where the
    stock SavedModel (weights in variables) kept 1.3x its size. Only the runtime's definition
    of the signature function is needed to call it, so :func:`load_runner` lets the rest go
    before the first call (:meth:`release_load_copies`, for a model with no captured inputs:
    one with variables keeps its loaded object, which owns them): 0.10 GiB kept, and the first
    call's peak 0.27 GiB over TensorFlow's import where it was 0.43.

    Every SavedModel the runner loads is called the same way (:meth:`bound`: the eager
    execution ``AtomicFunction.call_preflattened`` ends in), so the baseline and the candidates
    pay the same per-call overhead. Through the loaded ``ConcreteFunction._call_flat`` they did
    not: ``saved_model/load.py``'s wrapper walks the captured inputs in Python on every call,
    34 us more for the stock StringLookup classifier (a table and variables captured) and 12 for
    its frozen candidate (none), which made that candidate look 1.47x where the same graphs are
    1.25x through ``call_preflattened`` (``benchmarks/string_lookup.py --bindings``).
    """

    def __init__(self, concrete):
        from tensorflow.core.framework import function_pb2

        self._owner = concrete  # it, and the loaded object it holds, own any variables
        self.function_type = concrete.function_type
        self.captured_inputs = list(concrete.captured_inputs)
        self._atomic = concrete._inference_function
        # the call checks its argument count against the definition: its signature alone,
        # instead of a Python copy of the whole definition, constants included
        stub = function_pb2.FunctionDef()
        stub.signature.CopyFrom(self._atomic.definition.signature)
        self._atomic._cached_definition = stub
        self._released = False

    def release_load_copies(self) -> None:
        """Let go of everything but the runtime's definition of the function (a model whose
        calls read no variable)."""
        from tfopt.optimizer.system.free_memory import return_freed_memory

        self._owner = None
        self._atomic._cached_graph = None
        self._released = True
        return_freed_memory()

    def bound(self, flat: list):
        """A callable of no arguments: the function on ``flat`` inputs, structured outputs.

        It runs the function's kernel as ``call_preflattened`` does (one eager execution of
        the function by name, with the context's call options), minus the Python around it,
        which is the same for every model and only dilutes what the benchmark compares: the
        argument count checked once here, not per call; no gradient tape to pause (nothing
        differentiates a served model); no call-site stack traces to splice into a runtime
        error (the error is raised all the same). That Python cost ~25 us a call on this
        project's loaded 2-CPU machine, a third of the StringLookup classifier's stock call
        (``benchmarks/string_lookup.py --bindings``), where a server (TF Serving, C++) pays
        none of it. A function with resource or variant outputs, whose handle data the
        wrapper copies, is called through ``call_preflattened``.
        """
        atomic, args = self._atomic, [*flat, *self.captured_inputs]
        outputs = atomic.function_type.flat_outputs
        expected = len(atomic.cached_definition.signature.input_arg)
        if len(args) != expected:
            raise ValueError(f"{atomic.name.decode()} takes {expected} inputs, got {len(args)}")
        if any(output.dtype._handle_data for output in outputs):
            call = atomic.call_preflattened
            return lambda: call(args)
        from tensorflow.python import pywrap_tfe
        from tensorflow.python.eager import context

        runtime = context.context()
        runtime.ensure_initialized()
        attrs = tuple(item for pair in runtime.function_call_options.as_attrs().items()
                      for item in pair)
        execute, pack = pywrap_tfe.TFE_Py_Execute, atomic.function_type.pack_output
        handle, device, name, count = (runtime._handle, runtime.device_name,
                                       atomic.name.decode(), len(outputs))

        def call():
            return pack(execute(handle, device, name, args, attrs, count))

        call.function = self  # the runtime forgets the function once its holder is collected
        return call

    def __call__(self, *args, **kwargs):
        from tensorflow.python.eager.polymorphic_function import function_type_utils

        try:
            flat = self.function_type.unpack_inputs(
                function_type_utils.canonicalize_function_inputs(args, kwargs, self.function_type))
        except TypeError:
            if kwargs:
                raise
            flat = list(args)  # a pruned graph function: its flat signature, as called
        outputs = self._atomic.call_preflattened([*flat, *self.captured_inputs])
        if self._released:
            # the first call instantiated the function: Grappler's and the instantiation's
            # copies are garbage now (0.1 GiB of a 24 MiB MLP's 0.2 GiB kept, handed back)
            from tfopt.optimizer.system.free_memory import return_freed_memory

            self._released = False
            return_freed_memory()
        return outputs


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
    equivalence check (:mod:`tfopt.optimizer.optimize.worker`) runs big graphs this way."""
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
    from tfopt.optimizer.model.freeze import load_signature_function

    signature = get_signature(path, signature_name, policy=policy)
    fn = _signature_function(load_signature_function(path, signature_name, policy=policy))
    return TensorFlowRunner(signature, fn, by_keyword=True, description=f"SavedModel {path}")


def _signature_function(concrete):
    """``concrete`` as a :class:`SignatureFunction`, its load's copies let go when its calls
    read no variable; ``concrete`` itself where this TensorFlow's internals differ."""
    if not hasattr(concrete, "_inference_function") or not hasattr(concrete, "function_type"):
        return concrete
    fn = SignatureFunction(concrete)
    del concrete
    if not fn.captured_inputs:
        fn.release_load_copies()
    return fn


def read_signature(path: str | os.PathLike, signature_name: str = DEFAULT_SIGNATURE,
                   policy: ScanPolicy = DEFAULT_POLICY) -> SignatureInfo:
    return get_signature(path, signature_name, policy=policy)
