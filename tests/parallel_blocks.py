"""Tiny Inception-style and ResNet-style blocks for the substitution-rule tests.

Every conv has a constant filter and a constant bias (as in a frozen Keras model); weights come
from a fixed seed so each test sees the same graph.
"""

from __future__ import annotations

import numpy as np
from graph_testing import context, tf


def conv(x, kernel, out_channels, name, rng, strides=1, padding="SAME", bias=True, relu=True):
    """``name`` is the Conv2D; its BiasAdd is ``name/bias`` and its Relu ``name/relu``."""
    in_channels = x.shape[-1]
    filters = tf.constant(rng.normal(size=(kernel, kernel, in_channels, out_channels))
                          .astype(np.float32), name=f"{name}/filter")
    y = tf.nn.conv2d(x, filters, [1, strides, strides, 1], padding, name=name)
    if bias:
        y = tf.nn.bias_add(y, tf.constant(rng.normal(size=out_channels).astype(np.float32),
                                          name=f"{name}/bias_value"), name=f"{name}/bias")
    if relu:
        y = tf.nn.relu(y, name=f"{name}/relu")
    return y


def inception_block():
    """x -> 1x1 | 1x1 reduce -> 3x3 | 5x5 | maxpool -> 1x1, concatenated into ``out``."""
    rng = np.random.default_rng(0)
    x = tf.compat.v1.placeholder(tf.float32, [2, 9, 9, 8], name="x")
    b1 = conv(x, 1, 16, "b1", rng)
    b2 = conv(conv(x, 1, 8, "b2_reduce", rng), 3, 12, "b2", rng)
    b3 = conv(x, 5, 6, "b3", rng)
    pool = tf.nn.max_pool2d(x, 3, 1, "SAME", name="b4_pool")
    b4 = conv(pool, 1, 4, "b4", rng)
    tf.concat([b1, b2, b3, b4], axis=3, name="out")


def resnet_block(strides=2):
    """Bottleneck with a 1x1 projection shortcut beside the main branch's first 1x1 conv."""
    rng = np.random.default_rng(1)
    x = tf.compat.v1.placeholder(tf.float32, [2, 8, 8, 8], name="x")
    shortcut = conv(x, 1, 16, "shortcut", rng, strides=strides, relu=False)
    main = conv(x, 1, 4, "main_a", rng, strides=strides)
    main = conv(main, 3, 4, "main_b", rng)
    main = conv(main, 1, 16, "main_c", rng, relu=False)
    tf.nn.relu(tf.add(shortcut, main, name="add"), name="out")


def block_feeds(shape=(2, 9, 9, 8), seed=3):
    return {"x": np.random.default_rng(seed).normal(size=shape).astype(np.float32)}


def apply_all(rule, graph_def, ctx):
    """Apply ``rule`` at its first match until none is left; returns (graph, matches applied)."""
    applied = []
    while True:
        found = rule.matches(graph_def, ctx)
        if not found:
            return graph_def, applied
        applied.append(found[0])
        graph_def = rule.apply(graph_def, found[0], ctx)


def keras_branches(path):
    """A Keras model with parallel branches: a 1x1 and a 3x3 conv (with ReLU) on the input,
    concatenated, pooled, then two Dense heads on the pooled features."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((10, 10, 8), name="image")
    a = keras.layers.Conv2D(8, 1, padding="same", activation="relu")(inputs)
    b = keras.layers.Conv2D(6, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Concatenate()([a, b]))
    heads = [keras.layers.Dense(4, activation="relu")(x), keras.layers.Dense(3)(x)]
    keras.Model(inputs, keras.layers.Concatenate()(heads)).export(str(path), verbose=False)


def frozen_keras_branches(directory):
    """(graph_def, context, feeds) of :func:`keras_branches` exported under ``directory``."""
    from tfopt.optimizer.model.freeze import freeze

    keras_branches(directory / "model")
    model = freeze(directory / "model")
    ctx = context(model.input_node_names, model.output_node_names)
    feeds = {model.input_node_names[0]:
             np.random.default_rng(5).normal(size=(2, 10, 10, 8)).astype(np.float32)}
    return model.graph_def, ctx, feeds


def convs_in_while_loop(kernel_a=3, kernel_b=3):
    """Two sibling convs (``kernel_a``, ``kernel_b``) inside the body of a lowered while loop."""
    from control_flow_graphs import freeze_function

    rng = np.random.default_rng(4)
    wa = rng.normal(size=(kernel_a, kernel_a, 4, 2)).astype(np.float32)
    wb = rng.normal(size=(kernel_b, kernel_b, 4, 2)).astype(np.float32)

    def fn(x):
        def body(i, a):
            both = tf.concat([tf.nn.conv2d(a, wa, 1, "SAME"), tf.nn.conv2d(a, wb, 1, "SAME")], 3)
            return i + 1, tf.nn.relu(both) * 0.5
        _, result = tf.while_loop(lambda i, a: i < 3, body, [tf.constant(0), x])
        return tf.identity(result)
    return freeze_function(fn, tf.TensorSpec([1, 5, 5, 4], tf.float32, name="x"))
