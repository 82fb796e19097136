"""Two models trained here on scikit-learn's bundled tables, on which uniform full int8 breaks a
1-point accuracy budget for an honest reason; shared by the precision-search tests and
``benchmarks/precision_search.py``. Fixed seeds; no downloads; a few seconds each to train.

Both take the raw, unnormalized feature table and normalize it inside the model with a Keras
``Normalization`` layer adapted on the training split, as a model that must be served on raw
features is written. The features' ranges differ by four orders of magnitude (breast cancer: the
mean area reaches 2 500, the mean fractal dimension stays within 0.05-0.1; wine: proline
reaches 1 680, hue stays within 0.5-1.7), so quantizing the input tensor, or the centred
features the normalization's subtraction makes, with one per-tensor int8 scale (what full int8
does at the input: one scale per activation tensor) rounds every small-range feature to one or
two levels: the model loses what those features told it. Once normalized, every feature has
unit variance and int8 suits the rest of the model: the sensitive part is the normalization,
the costly part the wide dense layers after it.

The dense layers are wide (512) so that the int8 matrix products, not the call's fixed
overhead, decide the latency at batch 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfopt.optimizer.files.atomic import atomic_directory, atomic_file

TABLES = ("breast_cancer", "wine")
WIDTH = 1024


@dataclass(frozen=True)
class TrainedTable:
    """A model written as a SavedModel, its held-out split as an ``.npz`` (``x``, ``y``), its
    training inputs as calibration data (``x`` only), and its float test accuracy."""

    name: str
    saved_model: Path
    eval_data: Path
    calibration_data: Path
    test_accuracy: float


def load_table(name: str, seed: int = 0):
    """(x_train, x_test, y_train, y_test) of a scikit-learn bundled table, unscaled, float32,
    a stratified quarter held out."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    if name not in TABLES:
        raise ValueError(f"unknown table {name}; known: {', '.join(TABLES)}")
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


def train_table_model(name: str, workdir: str | os.PathLike, seed: int = 0, epochs: int = 30,
                      width: int = WIDTH, overwrite: bool = True) -> TrainedTable:
    """Train on ``name``'s table and write ``<workdir>/<name>_savedmodel``,
    ``<name>_eval.npz`` (held out, with labels) and ``<name>_calibration.npz`` (the training
    inputs)."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    import keras

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    x_train, x_test, y_train, y_test = load_table(name, seed)
    keras.utils.set_random_seed(seed)
    model = build_table_mlp(x_train, int(y_train.max()) + 1, width)
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
    return TrainedTable(name, saved_model, paths["eval"], paths["calibration"], float(accuracy))


def searched_candidate(model: TrainedTable, workdir: str | os.PathLike, mode: str,
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
