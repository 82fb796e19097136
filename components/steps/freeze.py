"""freeze: the pulled SavedModel's signature frozen and written back; the simplest candidate."""

from __future__ import annotations

import logging
from pathlib import Path

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import CandidateModel, PulledModel
from tfopt.components.pipeline.workspace import Workspace

log = logging.getLogger(__name__)
LABEL = "frozen"


def from_inputs(call) -> CandidateModel:
    """The table's entry (tfopt.components.pipeline.step_table)."""
    return freeze(call.config, call.pulled, call.workspace)


def freeze(config: PipelineConfig, pulled: PulledModel, ws: Workspace) -> CandidateModel:
    from tfopt.components.pipeline.memory_check import require_model_fits

    require_model_fits(config, pulled, "freeze")  # exit 7 now, not an OOM kill midway

    def run(step_dir: Path) -> CandidateModel:
        from tfopt.components.steps.evaluate import check_evaluation_data
        from tfopt.optimizer.benchmark.environment import model_digest
        from tfopt.optimizer.candidates.build import savedmodel_load_instructions
        from tfopt.optimizer.errors import EquivalenceError
        from tfopt.optimizer.model.export import write_saved_model
        from tfopt.optimizer.model.freeze import freeze as freeze_model
        from tfopt.optimizer.verify.equivalence import compare
        from tfopt.optimizer.verify.evaluation import refuse_nonfinite_input_model
        from tfopt.optimizer.verify.finite import refuse_nonfinite_source

        log.info("freeze: %s [%s]", pulled.path, config.signature)
        policy = config.security.scan_policy()
        frozen = freeze_model(pulled.path, config.signature, policy=policy)
        data = check_evaluation_data(config, frozen.signature)
        if data is not None:
            refuse_nonfinite_input_model(pulled.path, data, config.signature, policy,
                                         name=pulled.uri)
        report = compare(pulled.path, frozen, signature_name=config.signature, policy=policy)
        refuse_nonfinite_source(report.original_nan_values, report.original_inf_values,
                                pulled.uri, "inputs generated from its signature")
        if not report.within(atol=config.optimize.atol):
            raise EquivalenceError(f"frozen outputs differ from the source: {report.summary()}")
        target = step_dir / "savedmodel"
        write_saved_model(frozen, target, overwrite=True,
                          metadata={"source_uri": pulled.uri, "source_digest": pulled.digest})
        return CandidateModel(label=LABEL, path=str(target), kind="frozen",
                              digest=model_digest(target), equivalence=report.to_dict(),
                              how_to_load=savedmodel_load_instructions(config.signature))

    return ws.reuse_or_run("freeze", CandidateModel, run)
