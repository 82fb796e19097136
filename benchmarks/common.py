"""Shared by the benchmark scripts: model builders, result files, printing."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS_DIR = Path(__file__).resolve().parent / "results"

def identity_call(tensors: list):
    """A call of no arguments: an identity function of ``tensors``, called as the runner calls
    every SavedModel (:meth:`tfopt.optimizer.runtime.tensorflow.SignatureFunction.bound`). No
    SavedModel can be faster through that call, so a model's stock call over this one is the
    most any SavedModel of it can gain (its ceiling)."""
    from tfopt.optimizer.runtime.tensorflow import SignatureFunction
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()

    def identities(*inputs):
        return {f"input_{i}": tf.identity(x) for i, x in enumerate(inputs)}

    return SignatureFunction(tf.function(identities).get_concrete_function(*tensors)).bound(
        tensors)


KERAS_APPLICATIONS = {
    "ResNet50": ("ResNet50", (224, 224, 3)),
    "MobileNetV2": ("MobileNetV2", (224, 224, 3)),
    "InceptionV3": ("InceptionV3", (299, 299, 3)),
    "EfficientNetB0": ("EfficientNetB0", (224, 224, 3)),
}


def export_keras_application(name: str, workdir: Path, *, random_batch_norm: bool = False,
                             logits: bool = False) -> Path:
    """``keras.applications.<name>(weights=None)`` exported as a SavedModel (cached on disk).

    As initialized, such a model's outputs barely depend on its input (MobileNetV2's pooled
    features are ~1e-11, so its softmax is uniform to 1e-10), so output differences between
    variants say nothing. ``random_batch_norm`` draws every BatchNorm's statistics (gamma and
    variance in [0.5, 1.5], beta and mean ~ N(0, 0.1)), which also makes folding them a real
    rewrite; ``logits`` drops the final softmax so that differences are not squashed.
    """
    from tfopt.optimizer.tf_runtime import import_tensorflow

    import_tensorflow()
    import keras

    suffix = ("_random_bn" if random_batch_norm else "") + ("_logits" if logits else "")
    path = workdir / f"{name}{suffix}_savedmodel"
    if (path / "saved_model.pb").is_file():
        return path
    keras.utils.set_random_seed(0)
    builder_name, shape = KERAS_APPLICATIONS[name]
    model = getattr(keras.applications, builder_name)(
        weights=None, input_shape=shape, classifier_activation=None if logits else "softmax")
    if random_batch_norm:
        import numpy as np

        rng = np.random.default_rng(0)
        draws = {"gamma": lambda shape: rng.uniform(0.5, 1.5, shape),
                 "beta": lambda shape: rng.normal(0, 0.1, shape),
                 "moving_mean": lambda shape: rng.normal(0, 0.1, shape),
                 "moving_variance": lambda shape: rng.uniform(0.5, 1.5, shape)}
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                for attribute, draw in draws.items():
                    weight = getattr(layer, attribute, None)  # None: InceptionV3's scale=False
                    if weight is not None:
                        weight.assign(draw(tuple(weight.shape)).astype("float32"))
    model.export(str(path), verbose=False)
    return path


def write_result(name: str, payload: dict) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
               **payload}
    target = RESULTS_DIR / f"{name}.json"
    target.write_text(json.dumps(payload, indent=2) + "\n")
    return target


def add_result_arguments(parser, result_name: str) -> None:
    """``--result-name`` (the file under results/), ``--print-only`` (print the saved result,
    measure nothing) and ``--workdir`` (where models are built; default a temporary one)."""
    parser.add_argument("--result-name", default=result_name, dest="result_name")
    parser.add_argument("--print-only", action="store_true", dest="print_only")
    parser.add_argument("--workdir", type=Path, default=None)


def read_result(name: str) -> dict:
    return json.loads((RESULTS_DIR / f"{name}.json").read_text())


def model_names(parser, text: str) -> list[str]:
    """``--models ResNet50,MobileNetV2`` checked against what the benchmarks can build."""
    names = text.split(",")
    unknown = [n for n in names if n not in KERAS_APPLICATIONS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; "
                     f"choose from {', '.join(KERAS_APPLICATIONS)}")
    return names


def work_directory(path: Path | None, prefix: str) -> Path:
    """``--workdir`` when given (created), else a fresh temporary directory."""
    import tempfile

    workdir = path or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir
