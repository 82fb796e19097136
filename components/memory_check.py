"""Refuse, before any work, a model the step's memory budget cannot hold.

The budget is the pod's cgroup limit when there is one, else ``resources.memory_gb``, else the
machine's memory (:func:`optimizer.system.memory_budget.memory_budget`). A model estimated not to fit
(:func:`optimizer.model.footprint.optimizing_bytes`) is refused with one line giving the
estimate and the budget, exit 7, rather than killed by the kernel midway.
"""

from __future__ import annotations

from components.artifacts import PulledModel
from components.config import PipelineConfig


def require_model_fits(config: PipelineConfig, pulled: PulledModel, step: str) -> None:
    from optimizer.model.footprint import disk_bytes, optimizing_bytes
    from optimizer.system.memory_budget import GIB, memory_budget

    memory_budget(config.resources.memory_gb).require(
        optimizing_bytes(pulled.path),
        f"{step}: the model {pulled.uri} ({disk_bytes(pulled.path) / GIB:.2f} GiB on disk)")
