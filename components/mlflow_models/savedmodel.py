"""A SavedModel candidate as an MLflow Model: the ``tensorflow`` flavor, with pyfunc.

The SavedModel is copied as it is (``saved_model/``, byte for byte the candidate that was
benchmarked and checked, so its digest is the candidate's), never re-saved: re-tracing it through
``tf.saved_model.save`` could change the graph the gate measured. The flavor records it the way
MLflow records a SavedModel called through one of its signature defs: ``model_type:
tf1-estimator`` (MLflow's historical name for exactly that, whatever produced the model), with
``meta_graph_tags: [serve]`` and ``signature_def_key``. ``mlflow.tensorflow.load_model`` then
returns ``tf.saved_model.load(path).signatures[key]`` and pyfunc's ``predict`` takes
``{input key: array}`` and returns ``{output key: values}``, as TF Serving's predict API does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tfopt.components.pipeline.artifacts import CandidateModel

ARTIFACT = "saved_model"
# The distribution that runs it, under its two names; the first installed here is pinned.
RUNTIME_DISTRIBUTIONS = (("tensorflow-cpu", "tensorflow"),)


def add_flavor(mlflow_model, candidate: CandidateModel, dest: Path, signature_name: str,
               runtime_settings: dict, env_files: dict[str, str]) -> str:
    """Copy the SavedModel into ``dest`` and describe it in ``mlflow_model``; returns its path
    inside ``dest``."""
    from mlflow import pyfunc

    shutil.copytree(candidate.artifact_dir, dest / ARTIFACT)
    mlflow_model.add_flavor("tensorflow", saved_model_dir=ARTIFACT, meta_graph_tags=["serve"],
                            signature_def_key=signature_name, model_type="tf1-estimator",
                            code=None)
    pyfunc.add_to_model(mlflow_model, loader_module="mlflow.tensorflow", **env_files)
    return ARTIFACT
