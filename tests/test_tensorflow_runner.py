"""The TensorFlow runner's bound call: the same outputs as ``call``, its arguments matched to
the function's signature once, not on every call."""

import numpy as np

from optimizer.inputs.generated import make_inputs
from optimizer.model.freeze import freeze
from optimizer.runtime import load_runner
from optimizer.runtime.tensorflow import frozen_runner


def test_the_bound_call_matches_call_and_binds_its_arguments_once(model_dir, monkeypatch):
    from tensorflow.python.eager.polymorphic_function import function_type_utils

    bindings = []
    plain = function_type_utils.canonicalize_function_inputs

    def counted(*args, **kwargs):
        bindings.append(1)
        return plain(*args, **kwargs)

    monkeypatch.setattr(function_type_utils, "canonicalize_function_inputs", counted)
    stock = model_dir("keras_cnn")
    # a SavedModel's signature (called by keyword) and a frozen graph (positionally)
    for runner in (load_runner(stock), frozen_runner(freeze(stock))):
        tensors = runner.to_tensors(make_inputs(runner.signature, 2, seed=0))
        want = runner.outputs(runner.call(tensors))
        bound = runner.bind(tensors)
        bindings.clear()
        for _ in range(5):
            got = runner.outputs(bound())
        assert bindings == []  # call() binds on every call; the bound call never
        assert got.keys() == want.keys()
        for key, value in want.items():
            np.testing.assert_array_equal(got[key], value)
        runner.call(tensors)
        assert bindings  # the check above could fail: call does bind
