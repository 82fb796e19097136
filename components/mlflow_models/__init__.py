"""Candidates as MLflow Models: what ``mlflow.pyfunc.load_model``, ``mlflow models serve``,
``spark_udf``, MLServer/KServe and the registry UI expect to find in a registry version.

:func:`write_mlflow_model` makes, from one candidate, a directory holding::

    MLmodel                      flavors, signature, input example, metadata.tfopt
    requirements.txt             pinned: MLflow's pyfunc and the model's runtime, nothing more
    conda.yaml, python_env.yaml  the same, for MLflow's conda and virtualenv environments
    input_example.json           one row of inputs (and serving_input_example.json)
    runtime_settings.json        the thread settings and batch size tuned for it, if tuned
    saved_model/ | litert/ ...   the candidate itself, as benchmarked (its format's module)

``metadata.tfopt`` says ``format``, ``runtime``, ``artifact`` (the model file or SavedModel
directory, relative to the MLflow Model's root), ``candidate`` and ``signature``: the champion
lookup (:mod:`tfopt.components.tracking.champion`) and a ``models:/`` source (:mod:`tfopt.components.steps.
pull`) read it back (:mod:`tfopt.components.mlflow_models.mlmodel`). The flavor each format gets is in
:mod:`tfopt.components.mlflow_models.registry`.

The directory is written for the MLflow 3 logged model it is uploaded to: its id, artifact
location, run and creation time go into the MLmodel, so that every publish of the same logged
model writes the same files (a retried or racing publish uploads them again, harmlessly).
"""

from __future__ import annotations

import json
import logging
import shutil
from datetime import UTC, datetime
from pathlib import Path

from tfopt.components.mlflow_models.mlmodel import MLMODEL_FILE, RUNTIME_SETTINGS_FILE
from tfopt.components.pipeline.artifacts import CandidateModel
from tfopt.optimizer.model.signature import SignatureInfo

log = logging.getLogger(__name__)

__all__ = ["MLMODEL_FILE", "RUNTIME_SETTINGS_FILE", "write_mlflow_model"]


def _runtime_settings(path: str | Path | None) -> dict:
    if not path or not Path(path).is_file():
        return {}
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        log.warning("mlflow model: unreadable %s; published without runtime settings", path)
        return {}


def _write_environment(dest: Path, requirements: list[str]) -> dict[str, str]:
    """requirements.txt, conda.yaml and python_env.yaml, as MLflow's flavors write them;
    returns the pyfunc flavor's ``env`` entries."""
    import yaml
    from mlflow.utils.environment import (
        _CONDA_ENV_FILE_NAME,
        _PYTHON_ENV_FILE_NAME,
        _REQUIREMENTS_FILE_NAME,
        _mlflow_conda_env,
        _PythonEnv,
    )

    (dest / _REQUIREMENTS_FILE_NAME).write_text("\n".join(requirements) + "\n")
    conda = _mlflow_conda_env(additional_pip_deps=requirements, install_mlflow=False)
    (dest / _CONDA_ENV_FILE_NAME).write_text(yaml.safe_dump(conda, default_flow_style=False))
    _PythonEnv.current().to_yaml(str(dest / _PYTHON_ENV_FILE_NAME))
    return {"conda_env": _CONDA_ENV_FILE_NAME, "python_env": _PYTHON_ENV_FILE_NAME}


def write_mlflow_model(candidate: CandidateModel, signature: SignatureInfo, dest: str | Path,
                       *, runtime_settings: str | Path | None = None,
                       logged_model=None) -> Path:
    """The MLflow Model of ``candidate`` as the new directory ``dest``.

    ``signature`` is the source SavedModel's serving signature, which every candidate keeps;
    ``runtime_settings`` the tuned ``runtime_settings.json``; ``logged_model`` the
    ``mlflow.entities.LoggedModel`` the directory will be uploaded to.
    """
    from mlflow.models import Model
    from mlflow.models.utils import _save_example

    from tfopt.components.mlflow_models.registry import flavor_module
    from tfopt.components.mlflow_models.requirements import model_requirements
    from tfopt.components.mlflow_models.schema import input_example, model_signature

    flavor = flavor_module(candidate.format)
    dest = Path(dest)
    dest.mkdir(parents=True)
    identity = {}
    if logged_model is not None:
        created = datetime.fromtimestamp(logged_model.creation_timestamp / 1000, UTC)
        identity = {"artifact_path": logged_model.artifact_location,
                    "run_id": logged_model.source_run_id,
                    "model_uuid": logged_model.model_id, "model_id": logged_model.model_id,
                    "utc_time_created": created.replace(tzinfo=None)}
    mlflow_model = Model(signature=model_signature(signature), **identity)
    settings = _runtime_settings(runtime_settings)
    if settings:
        shutil.copy2(runtime_settings, dest / RUNTIME_SETTINGS_FILE)
    env_files = _write_environment(dest, model_requirements(flavor.RUNTIME_DISTRIBUTIONS))
    artifact = flavor.add_flavor(mlflow_model, candidate, dest, signature.name, settings,
                                 env_files)
    mlflow_model.metadata = {"tfopt": {
        "format": candidate.format, "runtime": candidate.runtime, "artifact": artifact,
        "candidate": candidate.label, "signature": signature.name}}
    example = input_example(signature)
    if example is not None:
        _save_example(mlflow_model, example, str(dest))
    mlflow_model.model_size_bytes = sum(p.stat().st_size for p in dest.rglob("*")
                                        if p.is_file())
    mlflow_model.save(str(dest / MLMODEL_FILE))
    return dest
