"""The demo's model: a small CNN trained on scikit-learn's bundled digits (no download).

Fixed seed; about ten seconds to train on two cores. The held-out split is written next to the
model as an ``.npz`` with ``x``/``y`` so that accuracy is real top-1 on data the model never saw.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfopt.optimizer.files.atomic import atomic_directory, atomic_file


@dataclass(frozen=True)
class DigitsModel:
    saved_model: Path
    eval_data: Path
    test_accuracy: float


def load_digits_split(seed: int = 0):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[..., np.newaxis]  # 8x8x1, in [0, 1]
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)


def build_digits_cnn():
    import keras

    inputs = keras.Input((8, 8, 1), name="image")
    x = keras.layers.Conv2D(16, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(32, 3, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    outputs = keras.layers.Dense(10, activation="softmax", name="digit")(x)
    return keras.Model(inputs, outputs)


def train_digits_model(workdir: str | os.PathLike, seed: int = 0, epochs: int = 15,
                       overwrite: bool = False) -> DigitsModel:
    """Train, then write ``<workdir>/digits_savedmodel`` and ``<workdir>/digits_eval.npz``."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    import keras

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    x_train, x_test, y_train, y_test = load_digits_split(seed)
    keras.utils.set_random_seed(seed)
    model = build_digits_cnn()
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=epochs, batch_size=32, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)

    saved_model = workdir / "digits_savedmodel"
    with atomic_directory(saved_model, overwrite=overwrite) as staging:
        model.export(str(staging), verbose=False)
    eval_data = workdir / "digits_eval.npz"
    with atomic_file(eval_data, overwrite=True) as staging, open(staging, "wb") as f:
        np.savez(f, x=x_test, y=y_test)
    return DigitsModel(saved_model, eval_data, float(accuracy))
