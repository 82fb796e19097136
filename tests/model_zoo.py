"""Small real models, exported as SavedModels, for tests. Fixed seeds; no downloads.

Each builder writes a SavedModel to ``path`` the way its users make one: Keras 3
``model.export``, ``tf.saved_model.save`` of a ``tf.Module``, or TF1's ``simple_save``.
"""

from __future__ import annotations

import numpy as np

from tfopt.optimizer.tf_runtime import import_tensorflow

tf = import_tensorflow()
import keras


def _randomize_batchnorm(model, seed: int) -> None:
    """Give BatchNorm non-trivial statistics so that folding it is actually exercised."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma, beta, mean, var = layer.get_weights()
            layer.set_weights([
                rng.uniform(0.5, 1.5, gamma.shape).astype("float32"),
                rng.normal(0, 0.1, beta.shape).astype("float32"),
                rng.normal(0, 0.1, mean.shape).astype("float32"),
                rng.uniform(0.5, 1.5, var.shape).astype("float32"),
            ])


def keras_cnn(path, seed: int = 0):
    """Conv2D + BatchNormalization + ReLU + pooling + Dense: the common vision pattern."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((16, 16, 3), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(16, 1)(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(5, activation="softmax")(x)
    model = keras.Model(inputs, outputs)
    _randomize_batchnorm(model, seed)
    model.export(str(path), verbose=False)
    return model


def keras_lstm(path, seed: int = 0):
    """An LSTM: its recurrence is a while loop in the graph."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((12, 6), name="sequence")
    x = keras.layers.LSTM(16, return_sequences=True)(inputs)
    x = keras.layers.LSTM(8)(x)
    outputs = keras.layers.Dense(4)(x)
    model = keras.Model(inputs, outputs)
    model.export(str(path), verbose=False)
    return model


def keras_gru(path, seed: int = 0):
    """Two GRUs, the second reading backwards and returning its last state only."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((7, 5), name="sequence")
    x = keras.layers.GRU(6, return_sequences=True)(inputs)
    x = keras.layers.GRU(4, go_backwards=True)(x)
    outputs = keras.layers.Dense(3)(x)
    model = keras.Model(inputs, outputs)
    model.export(str(path), verbose=False)
    return model


def keras_token_attention(path, seed: int = 0, vocab: int = 100, length: int = 10):
    """int32 token ids -> Embedding -> self-attention -> pooled logits."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((length,), dtype="int32", name="token_ids")
    x = keras.layers.Embedding(vocab, 16)(inputs)
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(x, x)
    x = keras.layers.LayerNormalization()(x + attended)
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(3)(x)
    model = keras.Model(inputs, outputs)
    model.export(str(path), verbose=False)
    return model


class TwoSignatureModule(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0)
        self.b = tf.Variable(np.array([0.5, -1.0, 2.0], dtype=np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="features")])
    def predict(self, features):
        return {"scores": tf.nn.relu(tf.matmul(features, self.w) + self.b)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="features"),
                                  tf.TensorSpec([], tf.float32, name="temperature")])
    def calibrated(self, features, temperature):
        logits = tf.matmul(features, self.w) + self.b
        return {"probabilities": tf.nn.softmax(logits / temperature),
                "logits": logits}


def tf_module_two_signatures(path):
    module = TwoSignatureModule()
    tf.saved_model.save(module, str(path), signatures={
        "serving_default": module.predict, "calibrated": module.calibrated})
    return module


def tf1_saved_model(path):
    """A TF1-style SavedModel (tag ``serve``) written by ``simple_save``."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        w = tf.compat.v1.get_variable(
            "w", initializer=tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2)))
        y = tf.nn.relu(tf.matmul(x, w), name="y")
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.saved_model.simple_save(session, str(path), {"x": x}, {"y": y})


class IgammaModule(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.math.igamma(tf.abs(x) + 1.0, tf.abs(x) + 0.5)}


def igamma_module(path):
    """A model with an op (Igamma, the regularized incomplete gamma function) that neither
    tf2onnx nor OpenVINO's TensorFlow frontend converts: what a converter refuses."""
    module = IgammaModule()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return module


def keras_bilstm_tagger(path, seed: int = 0):
    """A bidirectional LSTM tagger (as ``benchmarks/recurrent.py``'s, smaller): int32 token ids
    ``[batch, 10]`` -> ``Embedding(50, 8)`` -> ``Bidirectional(LSTM(6, return_sequences))`` ->
    ``Dense(3)`` per step."""
    keras.utils.set_random_seed(seed)
    ids = keras.Input((10,), dtype="int32", name="token_ids")
    x = keras.layers.Embedding(50, 8)(ids)
    x = keras.layers.Bidirectional(keras.layers.LSTM(6, return_sequences=True))(x)
    model = keras.Model(ids, keras.layers.Dense(3)(x))
    model.export(str(path), verbose=False)
    return model


class HugeInputModule(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([1, 40000, 40000], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.reduce_sum(x, axis=[1, 2])}


def huge_declared_input(path):
    """A model whose signature declares one input of ``[1, 40000, 40000]`` float32: 6 GiB to
    feed, in a SavedModel of a few KB (no weights)."""
    module = HugeInputModule()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return module


class NeverReturningModule(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        # the condition reads the input, so no graph rewrite can decide it, and is true for
        # every input (NaN included): the loop never ends
        total = tf.reduce_sum(x)
        steps = tf.while_loop(lambda i: tf.equal(total, total) | tf.not_equal(total, total),
                              lambda i: i + 1, [tf.constant(0)])
        return {"y": x * tf.cast(steps, tf.float32)}


def never_returning_loop(path):
    """A model whose call never returns: a ``tf.while_loop`` whose condition never turns
    false."""
    module = NeverReturningModule()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return module


class DigitsLikeModule(tf.Module):
    """The digits CNN's signature (``image: float32[None, 8, 8, 1]`` -> ``output_0``: 10 class
    scores) around a function of the image, given per instance."""

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="image")])
    def serve(self, image):
        per_row = tf.reduce_sum(image, axis=[1, 2, 3], keepdims=True)[:, :, 0, 0]  # [batch, 1]
        return {"output_0": self.scores(per_row)}


def _digits_like(path, scores):
    module = DigitsLikeModule(scores)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


def constant_classifier(path):
    """Class 0 for every image of the digits model's signature, with softmax scores: as
    accurate as the share of class 0 (~0.1 on digits), and far cheaper than any real model."""
    return _digits_like(path, lambda per_row: tf.nn.softmax(
        per_row * 0.0 + tf.constant([[5.0] + [0.0] * 9])))


def nan_classifier(path):
    """NaN for every image and class of the digits model's signature (log of a negative
    number): numpy's argmax of such a row is 0, which matches class 0 labels."""
    return _digits_like(path, lambda per_row: tf.math.log(-1.0 - tf.abs(per_row))
                        * tf.ones([1, 10]))


def softmax_classifier(path):
    """Finite scores for every image of the digits model's signature: the softmax of ten
    multiples of the image's sum, a model ``nan_classifier`` can be compared with."""
    return _digits_like(path, lambda per_row: tf.nn.softmax(
        per_row * tf.constant([[float(k) for k in range(10)]]) / 64.0))
