"""The TensorFlow runner's bound call: the same outputs as ``call``, its arguments matched to
the function's signature once, not on every call."""

import numpy as np

from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.runtime.tensorflow import frozen_runner


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


def test_a_frozen_savedmodel_is_called_without_the_copies_its_load_made(model_dir, tmp_path):
    """tfopt's frozen SavedModels (weights as constants) keep only the runtime's definition of
    the signature function: the load's whole-graph function is gone from the runtime, and the
    outputs are tf.saved_model.load's own."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    from tfopt.optimizer.model.export import write_saved_model
    from tfopt.optimizer.runtime.tensorflow import SignatureFunction

    frozen = write_saved_model(freeze(model_dir("keras_cnn")), tmp_path / "frozen")
    before = set(context.context().list_function_names())
    runner = load_runner(frozen)
    added = set(context.context().list_function_names()) - before
    assert isinstance(runner._fn, SignatureFunction) and runner._fn._owner is None
    assert runner._fn._atomic.name.decode() in added
    assert not any("wrapped_function" in name for name in added), added
    feeds = make_inputs(runner.signature, 2, seed=1)
    want = tf.saved_model.load(str(frozen)).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in feeds.items()})
    got = runner(feeds)
    bound = runner.outputs(runner.bind(runner.to_tensors(feeds))())
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value.numpy())
        np.testing.assert_array_equal(bound[key], value.numpy())
    # a stock SavedModel's function reads variables its loaded object owns: kept
    assert load_runner(model_dir("keras_cnn"))._fn._owner is not None


def test_the_bound_call_of_a_string_lookup_model_outlives_its_runner(tmp_path):
    """The stock StringLookup classifier captures its table and variables: bound once, its call
    gives the keyword call's outputs, and keeps working once the runner that bound it is gone
    (the runtime drops a function's definition when the last holder of it goes)."""
    import gc

    import string_models

    string_models.keras_string_lookup(tmp_path / "stock")
    runner = load_runner(tmp_path / "stock")
    feeds = {"tokens": string_models.tokens(3, 5, seed=4)}
    want = runner(feeds)
    bound = runner.bind(runner.to_tensors(feeds))
    del runner
    gc.collect()
    for _ in range(2):
        got = bound()
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_array_equal(got[key].numpy(), value)
