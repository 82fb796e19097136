"""Which module makes the MLflow Model of each candidate format.

One module per format, each defining ``RUNTIME_DISTRIBUTIONS`` (the packages that run the
model, each under its alternative names) and ``add_flavor(mlflow_model, candidate, dest,
signature_name, runtime_settings, env_files) -> artifact path``: it copies the candidate into
the model directory and adds the flavors (always ``python_function``, so that anything that
serves MLflow Models serves it). MLflow's own flavor is used where it has one for the format
(``tensorflow`` for a SavedModel, ``onnx``), a loader shipped with the model where it has none
(LiteRT, OpenVINO). Adding a format: a module here, one :data:`FLAVORS` line, a test file.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tfopt.optimizer.errors import TfoptError

FLAVORS: dict[str, str] = {
    "savedmodel": "tfopt.components.mlflow_models.savedmodel",
    "tflite": "tfopt.components.mlflow_models.litert",
    "onnx": "tfopt.components.mlflow_models.onnx",
    "openvino": "tfopt.components.mlflow_models.openvino",
}


class UnsupportedFormatError(TfoptError):
    """A candidate format no module here can log as an MLflow Model."""


def flavor_module(format: str) -> ModuleType:
    if format not in FLAVORS:
        raise UnsupportedFormatError(
            f"cannot log a '{format}' model as an MLflow Model: tfopt knows the flavors of "
            f"{', '.join(FLAVORS)} (add a module to components/mlflow_models/)")
    return importlib.import_module(FLAVORS[format])
