"""A LiteRT candidate as an MLflow Model: pyfunc, through a loader shipped with the model.

MLflow has no LiteRT flavor, so the model's ``python_function`` flavor names a small loader
module, :mod:`components.mlflow_models.tfopt_litert_loader`, copied into the model's ``code/``
directory: serving it needs MLflow, numpy and ``ai-edge-litert``, and neither tfopt nor
TensorFlow. The candidate's directory (``model.tflite`` and its JSON sidecar) becomes
``litert/``; the flavor's ``config`` names the file, the signature and the thread count tuning
chose (``runtime_settings.json``'s ``num_threads``), which a caller may override at load time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from components.artifacts import CandidateModel

ARTIFACT_DIR = "litert"
CODE_DIR = "code"
LOADER = Path(__file__).with_name("tfopt_litert_loader.py")
RUNTIME_DISTRIBUTIONS = (("ai-edge-litert",),)


def add_flavor(mlflow_model, candidate: CandidateModel, dest: Path, signature_name: str,
               runtime_settings: dict, env_files: dict[str, str]) -> str:
    """Copy the LiteRT file, its sidecar and the loader into ``dest`` and describe them in
    ``mlflow_model``; returns the file's path inside ``dest``."""
    from mlflow import pyfunc

    shutil.copytree(candidate.artifact_dir, dest / ARTIFACT_DIR)
    (dest / CODE_DIR).mkdir()
    shutil.copy2(LOADER, dest / CODE_DIR / LOADER.name)
    model_file = Path(candidate.path).name
    config = {"model_file": model_file, "signature": signature_name}
    if runtime_settings.get("num_threads"):
        config["num_threads"] = int(runtime_settings["num_threads"])
    pyfunc.add_to_model(mlflow_model, loader_module=LOADER.stem, data=ARTIFACT_DIR,
                        code=CODE_DIR, model_config=config, **env_files)
    return f"{ARTIFACT_DIR}/{model_file}"
