"""A folded lookup that only indexes an embedding becomes one gather of precomputed rows at
freeze time: exact in and out of the vocabulary, and left alone when anything else reads it."""

import collections

import numpy as np
import string_models
from string_models import OUT_OF_VOCABULARY, tokens

from optimizer.freeze import freeze
from optimizer.graph.lookup_gathers import ROWS
from optimizer.runtime import load_runner
from optimizer.runtime.tensorflow import frozen_runner
from optimizer.tf_runtime import import_tensorflow

tf = import_tensorflow()


def _ops(frozen) -> collections.Counter:
    return collections.Counter(n.op for n in frozen.graph_def.node)


def _assert_exact(stock, frozen, feeds):
    want, got = load_runner(stock)(feeds), frozen_runner(frozen)(feeds)
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value)


def test_string_lookup_into_embedding_is_one_gather_of_rows_and_exact(tmp_path):
    string_models.keras_string_lookup(tmp_path / "stock")
    frozen = freeze(tmp_path / "stock")
    ops = _ops(frozen)
    # the table's value gather, the Embedding's negative-id fix (Less, AddV2, SelectV2) gone
    assert ops["GatherV2"] == 2 and ops["Less"] == 0 and ops["AddV2"] == 0
    assert ops["SelectV2"] == 1
    rows = [n for n in frozen.graph_def.node if n.name.endswith(f"/{ROWS}")]
    assert len(rows) == 1
    assert rows[0].attr["value"].tensor.tensor_shape.dim[0].size == \
        len(string_models.STRING_VOCABULARY) + 1  # every key, and the miss
    words = np.concatenate([tokens(8, 5, seed=4), np.resize(OUT_OF_VOCABULARY, (2, 5))])
    _assert_exact(tmp_path / "stock", frozen, {"tokens": words})


def test_integer_lookup_into_embedding_is_exact(tmp_path):
    string_models.keras_integer_lookup(tmp_path / "stock")
    frozen = freeze(tmp_path / "stock")
    assert any(n.name.endswith(f"/{ROWS}") for n in frozen.graph_def.node)
    ids = np.array([[3, 7, -5, 1000], [2, 0, 19, -1]], np.int64)  # 2, 0 and -1 are misses
    _assert_exact(tmp_path / "stock", frozen, {"ids": ids})


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
