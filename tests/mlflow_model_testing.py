"""Candidates as the pipeline records them, for the tests of their MLflow Models."""

from __future__ import annotations

from pathlib import Path

import yaml

from tfopt.components.pipeline.artifacts import CandidateModel
from tfopt.optimizer.benchmark.environment import model_digest

LITERT_FILE = "model.tflite"


def one_thread_mlflow_model(source, candidate: CandidateModel, tmp_path_factory) -> Path:
    """``candidate``'s MLflow Model, written as publish writes it, tuned to one thread."""
    import json

    from tfopt.components.mlflow_models import write_mlflow_model
    from tfopt.optimizer.runtime import read_signature

    settings = tmp_path_factory.mktemp("tuned") / "runtime_settings.json"
    settings.write_text(json.dumps({"num_threads": 1, "intra_op_threads": None,
                                    "inter_op_threads": None}))
    destination = tmp_path_factory.mktemp("mlflow_model") / candidate.label
    write_mlflow_model(candidate, read_signature(source), destination, runtime_settings=settings)
    return destination


def image_batch(n: int, seed: int = 0) -> dict:
    """A batch for the keras_cnn test model."""
    import numpy as np

    return {"image": np.random.default_rng(seed).standard_normal((n, 16, 16, 3), "float32")}


def savedmodel_candidate(path, label: str = "optimized") -> CandidateModel:
    return CandidateModel(label=label, path=str(path), kind="optimized",
                          digest=model_digest(path), recipe="fold_constants")


def litert_candidate(source, folder, flavour: str = "fp32") -> CandidateModel:
    """``source`` converted to LiteRT into ``folder``, as the optimize step derives it."""
    from tfopt.optimizer.candidates.litert.convert import convert_to_litert
    from tfopt.optimizer.candidates.litert.manifest import load_snippet
    from tfopt.optimizer.runtime import read_signature

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    convert_to_litert(source, folder / LITERT_FILE, flavour)
    return CandidateModel(
        label=f"litert_{flavour}", path=str(folder / LITERT_FILE), kind="derived",
        digest=model_digest(folder), target="litert", variant=flavour, format="tflite",
        runtime="ai-edge-litert",
        how_to_load=load_snippet(LITERT_FILE, read_signature(folder / LITERT_FILE)))


def mlmodel(directory) -> dict:
    return yaml.safe_load((Path(directory) / "MLmodel").read_text())


def requirement_names(directory) -> list[str]:
    lines = (Path(directory) / "requirements.txt").read_text().split()
    return [line.split("==")[0] for line in lines]


def converted_candidate(source, folder, target: str, flavour: str = "fp32") -> CandidateModel:
    """``source`` converted to ONNX or OpenVINO into ``folder``, as the optimize step does."""
    from tfopt.optimizer.candidates.onnx.convert import convert_to_onnx
    from tfopt.optimizer.candidates.openvino.convert import convert_to_openvino

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    convert, file_name, runtime = {
        "onnx": (convert_to_onnx, "model.onnx", "onnxruntime"),
        "openvino": (convert_to_openvino, "model.xml", "openvino")}[target]
    converted = convert(source, folder / file_name, flavour)
    return CandidateModel(
        label=f"{target}_{flavour}", path=str(folder / file_name), kind="derived",
        digest=model_digest(folder), target=target, variant=flavour, format=target,
        runtime=runtime, how_to_load=converted.sidecar.load_python)
