"""Reading a downloaded MLflow Model back: which format it is, what runs it, where its model is.

Published models record it in their MLmodel's ``metadata.tfopt`` block (``format``,
``runtime``, ``artifact``: see :mod:`tfopt.components.mlflow_models`). An MLflow Model logged by
anything else is read from its flavor where the flavor says the format by itself
(``tensorflow``: a SavedModel in ``saved_model_dir``). Read with ``yaml.safe_load`` only and
without MLflow: the champion lookup and a ``models:/`` source read registry versions this way.
"""

from __future__ import annotations

from pathlib import Path

from tfopt.optimizer.errors import TfoptError
from tfopt.optimizer.runtime_tuning.record import RUNTIME_SETTINGS_FILE

__all__ = ["MLMODEL_FILE", "RUNTIME_SETTINGS_FILE", "artifact_inside", "recorded_format"]

MLMODEL_FILE = "MLmodel"
# MLflow flavors that say the format by themselves, and the key naming their artifact.
FLAVOR_FORMATS = {"tensorflow": ("savedmodel", "saved_model_dir"), "onnx": ("onnx", "data")}


def recorded_format(mlmodel: Path, where: str,
                    error: type[TfoptError]) -> tuple[str, str | None, str | None]:
    """``(format, runtime or None, artifact path inside the model or None)`` as ``mlmodel``
    records them; ``error`` (naming ``where``) when it records none this tfopt knows."""
    from tfopt.optimizer.files.yaml_files import read_yaml_file

    data = read_yaml_file(mlmodel, f"{where}: MLmodel", error)
    if not isinstance(data, dict):
        raise error(f"{where}: its MLmodel file is not a mapping")
    metadata = _mapping(data.get("metadata"), f"{where}: its MLmodel's metadata", error)
    recorded = _mapping(metadata.get("tfopt"), f"{where}: its MLmodel's metadata.tfopt", error)
    if recorded.get("format"):
        return (_text(recorded, "format", where, error), _text(recorded, "runtime", where, error),
                _text(recorded, "artifact", where, error))
    flavors = _mapping(data.get("flavors"), f"{where}: its MLmodel's flavors", error)
    for flavor, (fmt, artifact_key) in FLAVOR_FORMATS.items():
        if flavor in flavors:
            entry = _mapping(flavors[flavor], f"{where}: its MLmodel's flavor {flavor}", error)
            return fmt, None, _text(entry, artifact_key, where, error)
    raise error(f"{where} is an MLflow Model with flavors {', '.join(sorted(flavors)) or 'none'}, "
                f"none of which this tfopt can run")


def _mapping(value, what: str, error: type[TfoptError]) -> dict:
    """``value`` when it is a mapping, ``{}`` when absent; else ``error`` naming ``what``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(f"{what} is a {type(value).__name__}, not a mapping")
    return value


def _text(recorded: dict, key: str, where: str, error: type[TfoptError]) -> str | None:
    """``recorded[key]`` when it is a string, None when absent; else ``error``: a format or
    path written as a list or a number is a damaged or hostile MLmodel, never guessed at."""
    value = recorded.get(key)
    if value is None or isinstance(value, str):
        return value
    raise error(f"{where}: its MLmodel records {key} as {type(value).__name__} "
                f"{str(value)[:60]}, not a string")


def artifact_inside(directory: Path, artifact: str, where: str,
                    error: type[TfoptError]) -> Path:
    """``directory / artifact``, refused when it leads outside ``directory`` or is missing."""
    path = directory / artifact
    if not path.resolve().is_relative_to(directory.resolve()):
        raise error(f"{where}: its artifact path '{artifact}' leaves the model directory")
    if not path.exists():
        raise error(f"{where}: its artifact '{artifact}' is missing")
    return path
