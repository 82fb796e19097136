"""The pyfunc flavor of a format MLflow has no flavor for: the candidate's files and a loader
module shipped inside the model (``code/``), so that serving it needs neither tfopt nor
TensorFlow, only MLflow and the format's runtime."""

from __future__ import annotations

import shutil
from pathlib import Path

from tfopt.components.pipeline.artifacts import CandidateModel

CODE_DIR = "code"


def add_pyfunc_with_shipped_loader(mlflow_model, candidate: CandidateModel, dest: Path,
                                   artifact_dir: str, loader: Path, config: dict,
                                   env_files: dict[str, str]) -> str:
    """Copy the candidate's directory to ``dest/artifact_dir`` and ``loader`` to ``dest/code``,
    and make ``loader`` the model's pyfunc with ``config``; returns the model file's path
    inside ``dest``."""
    from mlflow import pyfunc

    shutil.copytree(candidate.artifact_dir, dest / artifact_dir)
    (dest / CODE_DIR).mkdir()
    shutil.copy2(loader, dest / CODE_DIR / loader.name)
    pyfunc.add_to_model(mlflow_model, loader_module=loader.stem, data=artifact_dir,
                        code=CODE_DIR, model_config=config, **env_files)
    return f"{artifact_dir}/{Path(candidate.path).name}"
