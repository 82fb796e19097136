"""Small real models with string features and vocabulary tables, as their users export them.

Keras 3 ``model.export`` of ``StringLookup`` / ``IntegerLookup`` / ``TextVectorization``
models, and a ``tf.Module`` whose table is filled from a vocabulary file that
``tf.saved_model.save`` copies into the model's ``assets/`` (the way TF Transform's
``tft.vocabulary`` + ``tft.apply_vocabulary`` export). Fixed seeds; no downloads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tfopt.optimizer.tf_runtime import import_tensorflow

tf = import_tensorflow()
import keras

# Non-ASCII tokens on purpose: both runtimes must feed them as UTF-8.
STRING_VOCABULARY = [f"tok{i}" for i in range(46)] + ["tök", "日本", "a b", "UPPER"]
INTEGER_VOCABULARY = [3, 7, 11, 19, 1000, -5]
TEXT_CORPUS = ["the cat sat", "the dog ran far", "a cat ran", "dogs and cats"]
OUT_OF_VOCABULARY = ["", "nope", "tok", "TOK1", "tok1 ", "日"]


def keras_string_lookup(path, seed: int = 0, vocabulary=STRING_VOCABULARY, length: int = 5,
                        embedding: int = 8):
    """string tokens -> StringLookup -> Embedding -> GlobalAveragePooling1D -> Dense(3)."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((length,), dtype="string", name="tokens")
    ids = keras.layers.StringLookup(vocabulary=list(vocabulary))(inputs)
    x = keras.layers.Embedding(len(vocabulary) + 1, embedding)(ids)
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(3)(x)
    model = keras.Model(inputs, outputs)
    model.export(str(path), verbose=False)
    return model


def keras_integer_lookup(path, seed: int = 0):
    """int64 ids -> IntegerLookup -> Embedding -> Flatten -> Dense(2)."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4,), dtype="int64", name="ids")
    x = keras.layers.IntegerLookup(vocabulary=INTEGER_VOCABULARY)(inputs)
    x = keras.layers.Embedding(len(INTEGER_VOCABULARY) + 1, 4)(x)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(2)(x)
    keras.Model(inputs, outputs).export(str(path), verbose=False)


def keras_text_vectorization(path, seed: int = 0):
    """sentences -> TextVectorization (lowercase, split, lookup) -> Embedding -> Dense(2)."""
    keras.utils.set_random_seed(seed)
    vectorize = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=6)
    vectorize.adapt(TEXT_CORPUS)
    inputs = keras.Input((1,), dtype="string", name="text")
    x = keras.layers.Embedding(21, 4)(vectorize(inputs))
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(2)(x)
    keras.Model(inputs, outputs).export(str(path), verbose=False)


class _AssetVocabulary(tf.Module):
    """A TF Transform style preprocessing + model: a vocabulary file, ``-1`` for unknown
    tokens mapped to one out-of-vocabulary row of the embedding."""

    def __init__(self, vocabulary_file: str, size: int, seed: int):
        super().__init__()
        initializer = tf.lookup.TextFileInitializer(
            vocabulary_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER)
        self.table = tf.lookup.StaticHashTable(initializer, default_value=-1)
        self.size = size
        rng = np.random.default_rng(seed)
        self.embedding = tf.Variable(rng.normal(size=(size + 1, 4)).astype(np.float32))
        self.dense = tf.Variable(rng.normal(size=(4, 3)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.string, name="words")])
    def serve(self, words):
        ids = self.table.lookup(words)
        ids = tf.where(ids < 0, tf.constant(self.size, tf.int64), ids)
        pooled = tf.reduce_mean(tf.gather(self.embedding, ids), axis=1)
        return {"scores": tf.matmul(pooled, self.dense)}


def asset_vocabulary_lookup(path, seed: int = 0, vocabulary=STRING_VOCABULARY):
    """Written to ``path``; its vocabulary file (one token a line) ends up in ``assets/``."""
    path = Path(path)
    source = path.parent / f"{path.name}-vocabulary.txt"
    source.write_text("".join(f"{token}\n" for token in vocabulary), encoding="utf-8")
    module = _AssetVocabulary(str(source), len(vocabulary), seed)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    source.unlink()  # the model must read its own copy
    return module


def tf1_lookup_model(path, make_initializer, assets=False):
    """A TF1 SavedModel (``Builder``, the tables initialized by its main op) whose signature
    looks ``words`` up in a table filled by ``make_initializer()``: ``(initializer, file name
    tensor or None)``; with ``assets`` the file name tensor is registered as the model's asset."""
    graph = tf.Graph()
    with graph.as_default():
        initializer, filename = make_initializer()
        table = tf.compat.v1.lookup.StaticHashTable(initializer, -1)
        words = tf.compat.v1.placeholder(tf.string, [None], name="words")
        ids = table.lookup(words)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.tables_initializer())
            builder = tf.compat.v1.saved_model.Builder(str(path))
            builder.add_meta_graph_and_variables(
                session, ["serve"], main_op=tf.compat.v1.tables_initializer(),
                assets_collection=[filename] if assets else None,
                signature_def_map={"serving_default": tf.compat.v1.saved_model
                                   .predict_signature_def({"words": words}, {"ids": ids})})
            builder.save()
    return Path(path)


def tokens(rows: int, length: int, seed: int = 0, vocabulary=STRING_VOCABULARY,
           unknown=OUT_OF_VOCABULARY) -> np.ndarray:
    """A unicode array of in-vocabulary tokens with every out-of-vocabulary one among them."""
    rng = np.random.default_rng(seed)
    drawn = np.asarray(vocabulary, dtype=object)[rng.integers(0, len(vocabulary), rows * length)]
    drawn[:len(unknown)] = unknown
    return rng.permutation(drawn).reshape(rows, length).astype(str)
