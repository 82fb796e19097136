"""optimize: the config's recipe (or substitution search) applied to the frozen graph, checked,
written back."""

from __future__ import annotations

import logging
from pathlib import Path

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import CandidateModel, PulledModel
from tfopt.components.pipeline.workspace import Workspace

log = logging.getLogger(__name__)
LABEL = "optimized"


def recipe_of(config: PipelineConfig):
    from tfopt.optimizer.optimize.recipe import Recipe
    from tfopt.optimizer.optimize.recipe_yaml import specs_from_yaml

    recipe = config.optimize.recipe
    if isinstance(recipe, str):
        return Recipe.from_string(recipe, source="optimize.recipe")
    return Recipe(tuple(specs_from_yaml(recipe, "optimize.recipe")), source="optimize.recipe")


def search_settings_of(config: PipelineConfig):
    """None for the recipe strategy; else how to search (the config's optimize.* keys)."""
    from tfopt.optimizer.search.settings import SearchSettings

    section = config.optimize
    if section.strategy == "recipe":
        return None
    return SearchSettings(strategy=section.strategy, alpha=section.alpha, budget=section.budget,
                          time_budget=section.time_budget_seconds, cost=section.cost)


def from_inputs(call) -> CandidateModel:
    """The table's entry (tfopt.components.pipeline.step_table). Its named part ``candidates`` is
    :func:`derive`."""
    return optimize(call.config, call.pulled, call.workspace)


def optimize(config: PipelineConfig, pulled: PulledModel, ws: Workspace) -> CandidateModel:
    from tfopt.components.pipeline.memory_check import require_model_fits

    require_model_fits(config, pulled, "optimize")  # exit 7 now, not an OOM kill midway

    def run(step_dir: Path) -> CandidateModel:
        from tfopt.optimizer.benchmark.environment import model_digest
        from tfopt.optimizer.candidates.build import savedmodel_load_instructions
        from tfopt.optimizer.optimize.flow import optimize as optimize_model
        from tfopt.optimizer.optimize.flow import write_optimized
        from tfopt.optimizer.verify.tolerance import Tolerance

        tolerance = Tolerance(atol=config.optimize.atol, rtol=config.optimize.rtol,
                              min_top1=config.optimize.min_top1)
        search = search_settings_of(config)
        policy = config.security.scan_policy()
        if search is None:
            recipe = recipe_of(config)
            log.info("optimize: %s with %s", pulled.path, recipe.text)
            result = optimize_model(pulled.path, recipe, config.signature, tolerance,
                                    backend=config.optimize.backend, policy=policy)
        else:
            log.info("optimize: %s by %s", pulled.path, search.describe())
            result = optimize_model(pulled.path, None, config.signature, tolerance,
                                    search=search, policy=policy)
        target = step_dir / "savedmodel"
        write_optimized(result, target, overwrite=True)  # refuses diverging outputs
        derived, skipped = derive(config, pulled, result.candidate.model, step_dir)
        return CandidateModel(
            label=LABEL, path=str(target), kind="optimized", digest=model_digest(target),
            recipe=result.candidate.recipe, equivalence=result.report.to_dict(),
            trace=[step.to_dict() for step in result.candidate.trace],
            how_to_load=savedmodel_load_instructions(config.signature),
            derived=[d.to_dict() for d in derived], skipped=[s.to_dict() for s in skipped])

    return ws.reuse_or_run("optimize", CandidateModel, run)


def derive(config: PipelineConfig, pulled: PulledModel, optimized, step_dir: Path
           ) -> tuple[list[CandidateModel], list]:
    """The candidates ``candidates.targets`` allows besides the optimized graph (bf16, XLA,
    LiteRT, ONNX, OpenVINO, and the mixed int8 ones ``candidates.precision_search`` finds
    inside the gate's accuracy budget), built under ``step_dir/candidates`` by the candidates
    stage (:func:`tfopt.optimizer.optimize.candidates_stage.build_candidates`); the int8 flavours that
    calibrate do it on calibration.data, else evaluation.data, else inputs generated from the
    signature (tagged synthetic). A mixed int8 candidate's record carries its search's table
    and trace in ``trace``."""
    from tfopt.components.steps.evaluate import local_data_file
    from tfopt.optimizer.benchmark.environment import model_digest
    from tfopt.optimizer.optimize.candidates_stage import build_candidates
    from tfopt.optimizer.search.precision.candidates import searched_targets
    from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings
    from tfopt.optimizer.system.memory_budget import memory_budget

    settings = config.candidates.settings()
    precision = PrecisionSearchSettings(mode=config.candidates.precision_search)
    policy = config.security.scan_policy()
    built = build_candidates(
        pulled.path, optimized, step_dir / "candidates", settings, signature=config.signature,
        precision=precision, accuracy_budget=config.gate.max_accuracy_drop_abs,
        calibration_data=config.calibration.data, eval_data_file=config.evaluation.data,
        fetch=lambda location: local_data_file(location, config, step_dir),
        eval_data=(_eval_data(config, pulled, step_dir)
                   if searched_targets(settings.targets, precision.mode) else None),
        metric=config.evaluation.metric, source_digest=pulled.digest,
        budget=memory_budget(config.resources.memory_gb), policy=policy)
    models = [CandidateModel.made(
        c, kind="derived", digest=model_digest(c.artifact_dir),
        **({"trace": [built.precision[c.label].to_dict()]} if c.label in built.precision
           else {})) for c in built.candidates]
    return models, built.skipped


def _eval_data(config: PipelineConfig, pulled: PulledModel, step_dir: Path):
    """evaluation.data as the precision search measures its error on, None without any."""
    if config.evaluation.data is None:
        return None
    from tfopt.components.steps.evaluate import local_data_file
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.verify.evaluation import load_labelled_data

    return load_labelled_data(
        local_data_file(config.evaluation.data, config, step_dir),
        get_signature(pulled.path, config.signature, policy=config.security.scan_policy()),
        config.evaluation.metric)
