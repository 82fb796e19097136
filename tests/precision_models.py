"""Models trained here on scikit-learn's bundled data, on which uniform full int8 breaks a
1-point accuracy budget for an honest reason; shared by the precision-search tests and
``benchmarks/precision_search.py``. Fixed seeds; no downloads; a few seconds each to train.

**Tables** (``breast_cancer``, ``wine``): both take the raw, unnormalized feature table and normalize it inside the model with a Keras
``Normalization`` layer adapted on the training split, as a model that must be served on raw
features is written. The features' ranges differ by four orders of magnitude (breast cancer: the
mean area reaches 2 500, the mean fractal dimension stays within 0.05-0.1; wine: proline
reaches 1 680, hue stays within 0.5-1.7), so quantizing the input tensor, or the centred
features the normalization's subtraction makes, with one per-tensor int8 scale (what full int8
does at the input: one scale per activation tensor) rounds every small-range feature to one or
two levels: the model loses what those features told it. Once normalized, every feature has
unit variance and int8 suits the rest of the model: the sensitive part is the normalization,
the costly part the wide dense layers after it.

The dense layers are wide (1024) so that the int8 matrix products, not the call's fixed
overhead, decide the latency at batch 1. Dynamic-range int8 never quantizes the normalization
either and keeps up with full int8 on dense layers, so these show the search is safe, not that
it pays much.

**Digits** (``digits_separable``, ``digits_inverted``): the 8x8 digit images as they ship (ink
0-16), standardized per pixel inside the model (a Keras ``Normalization`` with one mean and
variance per pixel of the training images, featurewise standardization), then a
MobileNetV1-style depthwise-separable convnet, or MobileNetV2-style inverted residual blocks
(expand 1x1, depthwise 3x3, linear 1x1 projection, residual add; ReLU6). Full int8 breaks on
the standardization, for two reasons:

- ``digits_separable`` is standardized as Keras' ``adapt`` sets it: four border pixels are
  never inked in the training images, their variance is 0 and Keras divides them by its
  epsilon (1e-7), so the per-pixel factor is a constant spanning 0.15 to 1e7. Full int8
  quantizes that constant with one per-tensor scale (1e7 / 127): every real pixel's factor
  rounds to 0, the network sees a blank image and answers one class.
- ``digits_inverted`` is standardized as scikit-learn's ``StandardScaler`` fits it (a
  zero-variance pixel keeps scale 1: no epsilon). Rarely inked pixels still have a standard
  deviation of 0.03, so the per-pixel factor spans 0.15 to 37; one per-tensor int8 scale for
  it (37 / 127 = 0.29) leaves the ordinary pixels' factors (0.15-0.5) one or two levels, up to
  half of their value wrong: 3 points lost.

Keeping the standardization's division in float restores the accuracy. Depthwise convolutions
are where dynamic-range int8 cannot keep up: it has no fast int8 depthwise kernel that takes
float activations, so it runs 2-3.5x slower than float there, while full int8 runs about
twice as fast as float.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfopt.optimizer.files.atomic import atomic_directory, atomic_file

TABLES = ("breast_cancer", "wine")
IMAGES = ("digits_separable", "digits_inverted")
MODELS = TABLES + IMAGES
WIDTH = 1024
SEPARABLE_WIDTH = 64
INVERTED_WIDTH = 32


@dataclass(frozen=True)
class TrainedModel:
    """A model written as a SavedModel, its held-out split as an ``.npz`` (``x``, ``y``), its
    training inputs as calibration data (``x`` only), and its float test accuracy."""

    name: str
    saved_model: Path
    eval_data: Path
    calibration_data: Path
    test_accuracy: float


def load_split(name: str, seed: int = 0):
    """(x_train, x_test, y_train, y_test) of ``name``'s scikit-learn bundled data, unscaled,
    float32 (tables: rows of features; digits: 8x8x1 images, ink 0-16), a stratified quarter
    held out."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    if name not in MODELS:
        raise ValueError(f"unknown model {name}; known: {', '.join(MODELS)}")
    if name in IMAGES:
        data = datasets.load_digits()
        x = data.images.astype(np.float32)[..., np.newaxis]
    else:
        data = getattr(datasets, f"load_{name}")()
        x = data.data.astype(np.float32)
    y = data.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)


def build_table_mlp(x_train: np.ndarray, classes: int, width: int = WIDTH):
    """Raw features -> Normalization (adapted on ``x_train``) -> 3 x Dense(width, relu) ->
    Dense(classes, softmax)."""
    import keras

    inputs = keras.Input((x_train.shape[1],), name="features")
    normalize = keras.layers.Normalization(name="normalize")
    normalize.adapt(x_train)
    x = normalize(inputs)
    for n in range(3):
        x = keras.layers.Dense(width, activation="relu", name=f"dense_{n}")(x)
    outputs = keras.layers.Dense(classes, activation="softmax", name="label")(x)
    return keras.Model(inputs, outputs)


def pixel_standardization(x_train: np.ndarray, as_keras_adapts: bool):
    """A Keras ``Normalization`` with one mean and variance per pixel of ``x_train``: as
    ``adapt`` sets it (a pixel of zero variance is divided by Keras' epsilon, 1e-7), or as
    scikit-learn's ``StandardScaler`` fits it (a pixel of zero variance keeps scale 1)."""
    import keras

    if as_keras_adapts:
        normalize = keras.layers.Normalization(axis=(1, 2, 3), name="normalize")
        normalize.adapt(x_train)
        return normalize
    variance = x_train.var(axis=0)
    variance[variance == 0] = 1.0
    return keras.layers.Normalization(axis=(1, 2, 3), mean=x_train.mean(axis=0),
                                      variance=variance, name="normalize")


def build_separable_cnn(x_train: np.ndarray, classes: int, width: int = SEPARABLE_WIDTH):
    """Raw 8x8x1 images -> per-pixel Normalization (adapted on ``x_train``) -> Conv 3x3 ->
    4 x (depthwise 3x3, pointwise 1x1), each with batch norm and relu (MobileNet's block) ->
    global average pool -> Dense(classes, softmax)."""
    import keras

    inputs = keras.Input(x_train.shape[1:], name="image")
    normalize = pixel_standardization(x_train, as_keras_adapts=True)

    def bn_relu(x):
        return keras.layers.ReLU()(keras.layers.BatchNormalization()(x))

    x = bn_relu(keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(
        normalize(inputs)))
    for channels in (width, 2 * width, 2 * width, 4 * width):
        x = bn_relu(keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x))
        x = bn_relu(keras.layers.Conv2D(channels, 1, use_bias=False)(x))
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(classes, activation="softmax", name="label")(x)
    return keras.Model(inputs, outputs)


def build_inverted_cnn(x_train: np.ndarray, classes: int, width: int = INVERTED_WIDTH):
    """Raw 8x8x1 images -> per-pixel Normalization (adapted on ``x_train``) -> Conv 3x3 ->
    MobileNetV2's inverted residual blocks (expand x6 1x1, depthwise 3x3, linear 1x1
    projection, the residual added where the width is kept; batch norm, ReLU6) at widths
    ``width`` x2, ``2*width`` x2, ``4*width`` -> global average pool -> Dense(classes,
    softmax)."""
    import keras

    inputs = keras.Input(x_train.shape[1:], name="image")
    normalize = pixel_standardization(x_train, as_keras_adapts=False)

    def bn(x, relu6: bool = True):
        x = keras.layers.BatchNormalization()(x)
        return keras.layers.ReLU(6.0)(x) if relu6 else x

    x = bn(keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(normalize(inputs)))
    for channels, repeats in ((width, 2), (2 * width, 2), (4 * width, 1)):
        for _ in range(repeats):
            y = bn(keras.layers.Conv2D(6 * x.shape[-1], 1, use_bias=False)(x))
            y = bn(keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False)(y))
            y = bn(keras.layers.Conv2D(channels, 1, use_bias=False)(y), relu6=False)
            x = keras.layers.Add()([x, y]) if x.shape[-1] == channels else y
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(classes, activation="softmax", name="label")(x)
    return keras.Model(inputs, outputs)


BUILDERS = {"digits_separable": (build_separable_cnn, SEPARABLE_WIDTH, 15),
            "digits_inverted": (build_inverted_cnn, INVERTED_WIDTH, 15)}


def train_model(name: str, workdir: str | os.PathLike, seed: int = 0,
                epochs: int | None = None, width: int | None = None,
                overwrite: bool = True) -> TrainedModel:
    """Train ``name`` (one of :data:`MODELS`) and write ``<workdir>/<name>_savedmodel``,
    ``<name>_eval.npz`` (held out, with labels) and ``<name>_calibration.npz`` (the training
    inputs)."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    import keras

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    x_train, x_test, y_train, y_test = load_split(name, seed)
    keras.utils.set_random_seed(seed)
    if name in IMAGES:
        build, default_width, default_epochs = BUILDERS[name]
        model = build(x_train, int(y_train.max()) + 1, width or default_width)
        epochs = epochs or default_epochs
    else:
        model = build_table_mlp(x_train, int(y_train.max()) + 1, width or WIDTH)
        epochs = epochs or 30
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=epochs, batch_size=32, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    saved_model = workdir / f"{name}_savedmodel"
    with atomic_directory(saved_model, overwrite=overwrite) as staging:
        model.export(str(staging), verbose=False)
    paths = {}
    for part, arrays in (("eval", {"x": x_test, "y": y_test}),
                         ("calibration", {"x": x_train})):
        paths[part] = workdir / f"{name}_{part}.npz"
        with atomic_file(paths[part], overwrite=True) as staging, open(staging, "wb") as f:
            np.savez(f, **arrays)
    return TrainedModel(name, saved_model, paths["eval"], paths["calibration"], float(accuracy))


def searched_candidate(model: TrainedModel, workdir: str | os.PathLike, mode: str,
                       budget: float = 0.01, cost_cache: str | os.PathLike | None = None,
                       samples: int = 50, target: str = "onnx", **settings):
    """``model`` searched by ``mode`` (:func:`tfopt.optimizer.search.precision.candidates.
    mixed_candidate`) with small budgets, calibrated on its training inputs and judged on
    its held-out split: the :class:`~tfopt.optimizer.search.precision.candidates.PrecisionOutcome`."""
    from tfopt.optimizer.inputs.calibration import choose_calibration
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.search.precision.candidates import mixed_candidate
    from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings
    from tfopt.optimizer.verify.evaluation import load_labelled_data

    signature = get_signature(model.saved_model, "serving_default")
    return mixed_candidate(
        model.saved_model, workdir,
        PrecisionSearchSettings(**{"mode": mode, "budget": 50, "measure_top": 2, **settings}),
        budget, signature="serving_default",
        calibration=choose_calibration(signature, samples,
                                       calibration_data=str(model.calibration_data)),
        eval_data=load_labelled_data(model.eval_data, signature, "top1"), samples=samples,
        cost_cache=cost_cache, target=target)
