"""A LiteRT candidate as an MLflow Model: pyfunc, through a loader shipped with the model.

MLflow has no LiteRT flavor, so the model's ``python_function`` flavor names a small loader
module, :mod:`tfopt.components.mlflow_models.tfopt_litert_loader`, copied into the model's ``code/``
directory: serving it needs MLflow, numpy and ``ai-edge-litert``, and neither tfopt nor
TensorFlow. The candidate's directory (``model.tflite`` and its JSON sidecar) becomes
``litert/``; the flavor's ``config`` names the file, the signature and the thread count tuning
chose (``runtime_settings.json``'s ``num_threads``), which a caller may override at load time.
"""

from __future__ import annotations

from pathlib import Path

from tfopt.components.mlflow_models.shipped_loader import add_pyfunc_with_shipped_loader
from tfopt.components.pipeline.artifacts import CandidateModel

ARTIFACT_DIR = "litert"
LOADER = Path(__file__).with_name("tfopt_litert_loader.py")
RUNTIME_DISTRIBUTIONS = (("ai-edge-litert",),)


def add_flavor(mlflow_model, candidate: CandidateModel, dest: Path, signature_name: str,
               runtime_settings: dict, env_files: dict[str, str]) -> str:
    """Copy the LiteRT file, its sidecar and the loader into ``dest`` and describe them in
    ``mlflow_model``; returns the file's path inside ``dest``."""
    config = {"model_file": Path(candidate.path).name, "signature": signature_name}
    if runtime_settings.get("num_threads"):
        config["num_threads"] = int(runtime_settings["num_threads"])
    return add_pyfunc_with_shipped_loader(mlflow_model, candidate, dest, ARTIFACT_DIR, LOADER,
                                          config, env_files)
