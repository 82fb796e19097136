"""MLflow pyfunc loader for an OpenVINO IR published by tfopt. Shipped inside the model.

Every OpenVINO MLflow Model tfopt publishes carries this file in its ``code/`` directory, and
its MLmodel names it as the ``python_function`` flavor's ``loader_module``. Serving it needs only
MLflow, numpy and ``openvino``: this module imports nothing from tfopt.

The flavor's ``config`` says what to run: ``model_file`` (inside the flavor's ``data``
directory), ``compile_options`` (the CPU plugin's properties the model was measured with, the
precision hint above all) and ``num_threads`` (tuned by tfopt; without it, the CPUs this process
may run on). A caller may override any of them at load time:
``mlflow.pyfunc.load_model(uri, model_config={"num_threads": 4})``.

``predict`` takes ``{input key: array}`` (or one array for a one-input model) and returns
``{output key: array}``. One infer request serves the calls, under a lock, since the scoring
server calls ``predict`` from a thread pool; outputs are copied out of its buffers.
"""

from __future__ import annotations

import os
import threading

import numpy as np


def _load_pyfunc(data_path: str, model_config: dict | None = None) -> OpenVINOModel:
    config = dict(model_config or {})
    return OpenVINOModel(os.path.join(data_path, config.get("model_file", "model.xml")),
                         compile_options=config.get("compile_options") or {},
                         num_threads=config.get("num_threads"))


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class OpenVINOModel:
    """One IR compiled for the CPU, called the way pyfunc calls a model."""

    def __init__(self, model_file: str, compile_options: dict | None = None,
                 num_threads: int | None = None):
        import openvino as ov

        self.num_threads = int(num_threads) if num_threads else _available_cpus()
        config = {**(compile_options or {}), "INFERENCE_NUM_THREADS": self.num_threads,
                  "PERFORMANCE_HINT": "LATENCY"}
        self._compiled = ov.Core().compile_model(model_file, "CPU", config)
        self._inputs = {port.get_any_name(): np.dtype(port.get_element_type().to_dtype())
                        for port in self._compiled.inputs}
        self._outputs = [port.get_any_name() for port in self._compiled.outputs]
        self._request = self._compiled.create_infer_request()
        self._lock = threading.Lock()

    def _feeds(self, data) -> dict[str, np.ndarray]:
        # The LiteRT loader's, repeated: each loader ships alone inside its model, importing
        # nothing but numpy and its runtime.
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
            result = self._request.infer(feeds)
            return {key: np.array(value, copy=True)
                    for key, value in zip(self._outputs, result.to_tuple())}
