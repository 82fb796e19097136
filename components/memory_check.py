"""Refuse, before any work, a model or inputs the step's memory budget cannot hold.

The budget is the pod's cgroup limit when there is one, else ``resources.memory_gb``, else the
machine's memory (:func:`tfopt.optimizer.system.memory_budget.memory_budget`). A model estimated not to fit
(:func:`tfopt.optimizer.model.footprint.optimizing_bytes`), or inputs generated from its signature at
the largest batch the run feeds (:mod:`tfopt.optimizer.inputs.sizing`), are refused with one line
giving the estimate and the budget, exit 7, rather than killed by the kernel midway.
"""

from __future__ import annotations

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import PulledModel


def require_model_fits(config: PipelineConfig, pulled: PulledModel, step: str) -> None:
    from tfopt.optimizer.model.footprint import disk_bytes, optimizing_bytes
    from tfopt.optimizer.system.memory_budget import GIB, memory_budget

    memory_budget(config.resources.memory_gb).require(
        optimizing_bytes(pulled.path),
        f"{step}: the model {pulled.uri} ({disk_bytes(pulled.path) / GIB:.2f} GiB on disk)")
    require_inputs_fit(config, pulled, step)


def require_inputs_fit(config: PipelineConfig, pulled: PulledModel, step: str) -> None:
    """Inputs generated from the signature (read without TensorFlow) at the batch the
    equivalence checks feed and at every ``benchmark.batch_sizes``; local ``.npz`` evaluation
    and calibration data from their headers (an ``s3://`` file is sized once fetched, by
    :func:`tfopt.components.steps.evaluate.local_data_file`)."""
    import zipfile
    from pathlib import Path

    from tfopt.optimizer.inputs.data_files import require_npz_fits
    from tfopt.optimizer.inputs.sizing import require_generated_inputs_fit
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.optimize.flow import EQUIVALENCE_BATCH_SIZE
    from tfopt.optimizer.system.memory_budget import memory_budget

    budget = memory_budget(config.resources.memory_gb)
    signature = get_signature(pulled.path, config.signature,
                              policy=config.security.scan_policy())
    require_generated_inputs_fit(signature, [EQUIVALENCE_BATCH_SIZE,
                                             *config.benchmark.batch_sizes], budget,
                                 f"{step}: generating inputs from the signature")
    for location in (config.evaluation.data, config.calibration.data):
        if location and not location.startswith("s3://") and zipfile.is_zipfile(location):
            require_npz_fits(Path(location), budget)
