"""An ONNX candidate as an MLflow Model: MLflow's own ``onnx`` flavor, with pyfunc.

MLflow's onnx pyfunc (``mlflow.onnx``) opens the file with ONNX Runtime and feeds it by input
name; tfopt's conversion names a graph's inputs and outputs by the SavedModel signature's keys
(:mod:`tfopt.optimizer.candidates.onnx.convert`), so ``predict({input key: array})`` returns
``{output key: array}`` as the SavedModel's signature does. The flavor's
``onnx_session_options`` carry how the benchmark ran it (:mod:`tfopt.optimizer.runtime.onnx`): the
tuned thread count, one inter-op thread, sequential execution, the pool's workers spinning
when there is more than one thread.

MLflow's loader reads the MLmodel from the directory holding the ``.onnx`` file, so the file and
its sidecar sit at the model's root, not in a subdirectory as LiteRT's do.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tfopt.components.pipeline.artifacts import CandidateModel
from tfopt.optimizer.runtime.onnx import spinning_config

# onnx for mlflow.onnx's import, onnxruntime to run it; each under its one name.
RUNTIME_DISTRIBUTIONS = (("onnx",), ("onnxruntime",))
PROVIDERS = ["CPUExecutionProvider"]


def session_options(runtime_settings: dict) -> dict:
    """``onnx_session_options`` as MLflow's onnx flavor reads them."""
    options = {"inter_op_num_threads": 1, "execution_mode": "SEQUENTIAL"}
    if runtime_settings.get("num_threads"):
        threads = int(runtime_settings["num_threads"])
        options["intra_op_num_threads"] = threads
        options["extra_session_config"] = spinning_config(threads)
    return options


def add_flavor(mlflow_model, candidate: CandidateModel, dest: Path, signature_name: str,
               runtime_settings: dict, env_files: dict[str, str]) -> str:
    """Copy the ``.onnx`` file and its sidecar into ``dest`` and describe them in
    ``mlflow_model``; returns the file's path inside ``dest``."""
    import onnx
    from mlflow import pyfunc

    for path in Path(candidate.artifact_dir).iterdir():
        shutil.copy2(path, dest / path.name)
    model_file = Path(candidate.path).name
    mlflow_model.add_flavor("onnx", onnx_version=onnx.__version__, data=model_file,
                            providers=PROVIDERS,
                            onnx_session_options=session_options(runtime_settings), code=None)
    pyfunc.add_to_model(mlflow_model, loader_module="mlflow.onnx", data=model_file, **env_files)
    return model_file
