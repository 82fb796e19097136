"""tfopt: a trained TensorFlow SavedModel in, a faster one out, with the evidence to trust it.

The Python door to what the ``tfopt`` command and the pipeline do::

    import tfopt

    outcome = tfopt.optimize("model/", "fast/", targets="savedmodel,litert,onnx")
    outcome = tfopt.run("pipeline.yaml")

Both are imported on first use: ``import tfopt`` itself loads neither TensorFlow nor MLflow.
The library and the pipeline live in the subpackages ``tfopt.optimizer`` (the graph work, no
Airflow or MLflow), ``tfopt.components`` (storage, tracking, the CLI) and ``tfopt.dags``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tfopt")
except PackageNotFoundError:  # a checkout on sys.path, not installed
    __version__ = "0+unknown"

__all__ = ["__version__", "optimize", "run"]


def __getattr__(name: str):
    if name in ("optimize", "run"):
        from tfopt.components import api

        return getattr(api, name)
    raise AttributeError(f"module 'tfopt' has no attribute {name!r}")
