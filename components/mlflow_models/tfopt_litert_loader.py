"""MLflow pyfunc loader for a LiteRT model published by tfopt. Shipped inside the model.

Every LiteRT MLflow Model tfopt publishes carries this file in its ``code/`` directory, and its
MLmodel names it as the ``python_function`` flavor's ``loader_module``. So whatever serves the
model (``mlflow.pyfunc.load_model``, ``mlflow models serve``, ``spark_udf``, MLServer) needs
neither tfopt nor TensorFlow: only MLflow, numpy and ``ai-edge-litert``, the requirements the
model lists. Keep it that way: this module imports nothing from tfopt.

The flavor's ``config`` says what to run: ``model_file`` (inside the flavor's ``data``
directory), ``signature`` (the SavedModel signature the file was converted from, keys and
all) and ``num_threads`` (tuned by tfopt for this model; without it, the CPUs this process may
run on, since the interpreter's own default is one thread). Any of them can be overridden at
load time: ``mlflow.pyfunc.load_model(uri, model_config={"num_threads": 4})``.

``predict`` takes ``{input key: array}`` (or one array for a one-input signature) and returns
``{output key: array}``, as the SavedModel's signature does. A LiteRT interpreter holds one set
of tensor buffers and is not safe to call from two threads at once; the scoring server calls
``predict`` from a thread pool, so calls take a lock, and outputs are copied out of the
interpreter's buffers before the next call can overwrite them.
"""

from __future__ import annotations

import os
import threading

import numpy as np


def _load_pyfunc(data_path: str, model_config: dict | None = None) -> LiteRTModel:
    config = dict(model_config or {})
    return LiteRTModel(os.path.join(data_path, config.get("model_file", "model.tflite")),
                       signature=config.get("signature", "serving_default"),
                       num_threads=config.get("num_threads"))


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class LiteRTModel:
    """One signature of one ``.tflite`` file, called the way pyfunc calls a model."""

    def __init__(self, model_file: str, signature: str = "serving_default",
                 num_threads: int | None = None):
        from ai_edge_litert.interpreter import Interpreter

        self.num_threads = int(num_threads) if num_threads else _available_cpus()
        self._interpreter = Interpreter(model_path=model_file, num_threads=self.num_threads)
        signatures = self._interpreter.get_signature_list()
        if signature not in signatures:
            raise ValueError(f"{model_file} has no signature '{signature}'; it has "
                             f"{', '.join(signatures) or 'none'}")
        self._run = self._interpreter.get_signature_runner(signature)
        self._inputs = {key: np.dtype(details["dtype"])
                        for key, details in self._run.get_input_details().items()}
        self._lock = threading.Lock()

    def _feeds(self, data) -> dict[str, np.ndarray]:
        # MLflow has already checked and converted the input against the model's signature
        # (a DataFrame, from spark_udf, becomes arrays of the tensor specs' shapes).
        if not isinstance(data, dict):
            if len(self._inputs) != 1:
                raise ValueError(f"this model takes named inputs {sorted(self._inputs)}; "
                                 f"pass a dict of arrays")
            data = {next(iter(self._inputs)): data}
        missing = sorted(set(self._inputs) - set(data))
        if missing:
            raise ValueError(f"inputs missing: {', '.join(missing)}")
        return {key: np.asarray(data[key], dtype=dtype, order="C")
                for key, dtype in self._inputs.items()}

    def predict(self, data, params: dict | None = None) -> dict[str, np.ndarray]:
        feeds = self._feeds(data)
        with self._lock:
            outputs = self._run(**feeds)
            return {key: np.array(value, copy=True) for key, value in outputs.items()}
