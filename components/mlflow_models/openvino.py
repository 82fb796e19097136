"""An OpenVINO candidate as an MLflow Model: pyfunc, through a loader shipped with the model.

MLflow has no OpenVINO flavor, so the model's ``python_function`` flavor names a small loader
module, :mod:`tfopt.components.mlflow_models.tfopt_openvino_loader`, copied into ``code/``: serving it
needs MLflow, numpy and ``openvino``, neither tfopt nor TensorFlow. The candidate's directory
(``model.xml``, ``model.bin`` and the sidecar) becomes ``openvino/``. The flavor's ``config``
names the file, the CPU plugin's options the candidate was measured with (above all its
``INFERENCE_PRECISION_HINT``: the IR cannot carry it, and the plugin's default on a bfloat16 CPU
is bf16, :mod:`tfopt.optimizer.runtime.openvino`) and the thread count tuning chose.
"""

from __future__ import annotations

from pathlib import Path

from tfopt.components.mlflow_models.shipped_loader import add_pyfunc_with_shipped_loader
from tfopt.components.pipeline.artifacts import CandidateModel

ARTIFACT_DIR = "openvino"
LOADER = Path(__file__).with_name("tfopt_openvino_loader.py")
RUNTIME_DISTRIBUTIONS = (("openvino",),)


def add_flavor(mlflow_model, candidate: CandidateModel, dest: Path, signature_name: str,
               runtime_settings: dict, env_files: dict[str, str]) -> str:
    """Copy the IR, its weights, its sidecar and the loader into ``dest`` and describe them in
    ``mlflow_model``; returns the IR's path inside ``dest``."""
    from tfopt.optimizer.model.sidecar import runtime_options

    config = {"model_file": Path(candidate.path).name,
              "compile_options": runtime_options(candidate.path, "openvino")}
    if runtime_settings.get("num_threads"):
        config["num_threads"] = int(runtime_settings["num_threads"])
    return add_pyfunc_with_shipped_loader(mlflow_model, candidate, dest, ARTIFACT_DIR, LOADER,
                                          config, env_files)
