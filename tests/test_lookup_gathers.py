"""A folded lookup that only indexes an embedding becomes one gather of precomputed rows at
freeze time, and is left alone when anything else reads it. (Keras StringLookup and
IntegerLookup into an Embedding, folded and exact: tests/test_lookup_tables.py.)"""

import collections

import numpy as np
import string_models
from string_models import OUT_OF_VOCABULARY, tokens

from tfopt.optimizer.graph.lookup_gathers import ROWS
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.runtime.tensorflow import frozen_runner
from tfopt.optimizer.tf_runtime import import_tensorflow

tf = import_tensorflow()


def _ops(frozen) -> collections.Counter:
    return collections.Counter(n.op for n in frozen.graph_def.node)


def _assert_exact(stock, frozen, feeds):
    want, got = load_runner(stock)(feeds), frozen_runner(frozen)(feeds)
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value)


class _Tagger(tf.Module):
    """A lookup the fold must leave: its ids are an output, or shifted by a value of the
    input (not a constant function of the table position)."""

    def __init__(self, shifted: bool):
        super().__init__()
        vocabulary = string_models.STRING_VOCABULARY
        self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(vocabulary), tf.range(len(vocabulary), dtype=tf.int64)), 0)
        self.embedding = tf.Variable(
            np.random.default_rng(0).standard_normal((len(vocabulary) + 2, 3), np.float32))
        self.shifted = shifted

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.string, name="words")])
    def serve(self, words):
        ids = self.table.lookup(words)
        if self.shifted:
            shift = tf.cast(tf.strings.length(words) > 3, tf.int64)
            return {"vectors": tf.gather(self.embedding, ids + shift)}
        return {"ids": ids, "vectors": tf.gather(self.embedding, ids)}


def test_a_lookup_read_by_anything_but_constant_gathers_is_left_alone(tmp_path):
    words = {"words": np.concatenate([tokens(3, 4, seed=1),
                                      np.resize(OUT_OF_VOCABULARY, (1, 4))])}
    for shifted in (False, True):
        module = _Tagger(shifted)
        path = tmp_path / f"shifted_{shifted}"
        tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
        frozen = freeze(path)
        assert not any(n.name.endswith(f"/{ROWS}") for n in frozen.graph_def.node)
        assert _ops(frozen)["GatherV2"] == 3  # key, value and embedding gathers, as folded
        _assert_exact(path, frozen, words)
