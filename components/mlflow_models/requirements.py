"""What a published model needs installed to be loaded and served: pinned, and nothing more.

MLflow's ``python_function`` machinery itself (``mlflow-skinny``: the pyfunc loader, the scoring
server, the registry client; and the numpy and pandas it imports), plus the model's own runtime
(TensorFlow for a SavedModel, ``ai-edge-litert`` for a LiteRT file, ``onnx`` and ``onnxruntime``
for ONNX, ``openvino`` for an IR; never TensorFlow beside another runtime). Each is pinned
to the version installed here, the one the model was benchmarked and checked with. The full
``mlflow`` package (tracking server, UI, SQL stores) is not needed to serve a model and is left
out.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from tfopt.optimizer.errors import TfoptError

PYFUNC_DISTRIBUTIONS = ("mlflow-skinny", "numpy", "pandas")


class RequirementError(TfoptError):
    """A package the published model needs is not installed here, so it cannot be pinned."""


def pinned(*alternatives: str) -> str:
    """``name==version`` of the first of ``alternatives`` installed here (one package that
    ships under several names: tensorflow-cpu or tensorflow)."""
    for name in alternatives:
        try:
            return f"{name}=={version(name)}"
        except PackageNotFoundError:
            continue
    raise RequirementError(f"cannot pin the model's requirement {' or '.join(alternatives)}: "
                           f"not installed here")


def model_requirements(runtime: Sequence[Sequence[str]]) -> list[str]:
    """The pinned requirements of a model run by ``runtime``: its packages, each given as its
    alternative names."""
    return [pinned(name) for name in PYFUNC_DISTRIBUTIONS] + [pinned(*names) for names in runtime]
