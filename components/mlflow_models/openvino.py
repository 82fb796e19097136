"""An OpenVINO candidate as an MLflow Model: pyfunc, through a loader shipped with the model.

MLflow has no OpenVINO flavor, so the model's ``python_function`` flavor names a small loader
module, :mod:`components.mlflow_models.tfopt_openvino_loader`, copied into ``code/``: serving it
needs MLflow, numpy and ``openvino``, neither tfopt nor TensorFlow. The candidate's directory
(``model.xml``, ``model.bin`` and the sidecar) becomes ``openvino/``. The flavor's ``config``
names the file, the CPU plugin's options the candidate was measured with (above all its
``INFERENCE_PRECISION_HINT``: the IR cannot carry it, and the plugin's default on a bfloat16 CPU
is bf16, :mod:`optimizer.runtime.openvino`) and the thread count tuning chose.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from components.artifacts import CandidateModel

ARTIFACT_DIR = "openvino"
CODE_DIR = "code"
LOADER = Path(__file__).with_name("tfopt_openvino_loader.py")
RUNTIME_DISTRIBUTIONS = (("openvino",),)


def add_flavor(mlflow_model, candidate: CandidateModel, dest: Path, signature_name: str,
               runtime_settings: dict, env_files: dict[str, str]) -> str:
    """Copy the IR, its weights, its sidecar and the loader into ``dest`` and describe them in
    ``mlflow_model``; returns the IR's path inside ``dest``."""
    from mlflow import pyfunc

    from optimizer.sidecar import runtime_options

    shutil.copytree(candidate.artifact_dir, dest / ARTIFACT_DIR)
    (dest / CODE_DIR).mkdir()
    shutil.copy2(LOADER, dest / CODE_DIR / LOADER.name)
    model_file = Path(candidate.path).name
    config = {"model_file": model_file,
              "compile_options": runtime_options(candidate.path, "openvino")}
    if runtime_settings.get("num_threads"):
        config["num_threads"] = int(runtime_settings["num_threads"])
    pyfunc.add_to_model(mlflow_model, loader_module=LOADER.stem, data=ARTIFACT_DIR,
                        code=CODE_DIR, model_config=config, **env_files)
    return f"{ARTIFACT_DIR}/{model_file}"
