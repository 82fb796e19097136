"""optimize: the config's recipe (or substitution search) applied to the frozen graph, checked,
written back."""

from __future__ import annotations

import logging
import math
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
    LiteRT, ONNX, OpenVINO), built under ``step_dir/candidates``; the int8 flavours that
    calibrate do it on calibration.data, else evaluation.data, else inputs generated from the
    signature (tagged synthetic)."""
    from tfopt.optimizer.benchmark.environment import model_digest
    from tfopt.optimizer.candidates.build import derive_candidates
    from tfopt.optimizer.search.precision.candidates import searched_targets
    from tfopt.optimizer.system.memory_budget import memory_budget

    settings = config.candidates.settings()
    searched = searched_targets(settings.targets, config.candidates.precision_search)
    searches = bool(searched)
    calibration = _calibration(config, pulled, step_dir, settings, force=searches)
    made, skipped = derive_candidates(
        pulled.path, optimized, step_dir / "candidates", settings, signature=config.signature,
        calibration=calibration, source_digest=pulled.digest,
        budget=memory_budget(config.resources.memory_gb), policy=config.security.scan_policy())
    models = [CandidateModel.made(c, kind="derived", digest=model_digest(c.artifact_dir))
              for c in made]
    for target in searched:
        mixed = _mixed_precision(config, pulled, step_dir, calibration,
                                 {c.label: c.path for c in made}, target)
        if mixed is not None:
            models.append(mixed)
    return models, skipped


def _mixed_precision(config: PipelineConfig, pulled: PulledModel, step_dir: Path, calibration,
                     built: dict[str, str], target: str) -> CandidateModel | None:
    """``onnx_mixed_int8`` or ``litert_mixed_int8``, by ``target``
    (:mod:`tfopt.optimizer.search.precision.candidates`) under the gate's
    accuracy budget, its search's table and trace in the record's ``trace``; None when the
    search is off for this model or found nothing inside the budget. A search that fails is
    logged and leaves the other candidates to the gate."""
    from tfopt.components.steps.evaluate import local_data_file
    from tfopt.optimizer.benchmark.environment import model_digest
    from tfopt.optimizer.errors import first_line
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.search.precision.candidates import mixed_candidate
    from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings
    from tfopt.optimizer.verify.evaluation import load_labelled_data

    policy = config.security.scan_policy()
    try:
        eval_data = None
        if config.evaluation.data is not None:
            eval_data = load_labelled_data(
                local_data_file(config.evaluation.data, config, step_dir),
                get_signature(pulled.path, config.signature, policy=policy),
                config.evaluation.metric)
        outcome = mixed_candidate(
            pulled.path, step_dir / "candidates",
            PrecisionSearchSettings(mode=config.candidates.precision_search),
            # no accuracy bound at the gate: uniform int8 passes it, and auto searches nothing
            math.inf if config.gate.max_accuracy_drop_abs is None
            else config.gate.max_accuracy_drop_abs, signature=config.signature,
            calibration=calibration, eval_data=eval_data, metric=config.evaluation.metric,
            samples=config.candidates.calibration_samples, source_digest=pulled.digest,
            policy=policy, built=built, target=target)
    except Exception as exc:  # noqa: BLE001 - a search that fails leaves the other candidates
        log.warning("optimize: precision search (%s) failed, no mixed int8 candidate: %s",
                    target, first_line(exc))
        return None
    log.info("optimize: precision search (%s) %s: %s", target, outcome.strategy,
             f"float layers {list(outcome.candidate.float_layers)}" if outcome.candidate
             else outcome.reason)
    if outcome.candidate is None:
        return None
    candidate = outcome.candidate
    return CandidateModel.made(candidate, kind="derived",
                               digest=model_digest(candidate.artifact_dir),
                               trace=[outcome.to_dict()])


def _calibration(config: PipelineConfig, pulled: PulledModel, step_dir: Path, settings,
                 force: bool = False):
    if not settings.calibrates and not force:
        return None
    from tfopt.components.steps.evaluate import local_data_file
    from tfopt.optimizer.inputs.calibration import choose_calibration
    from tfopt.optimizer.model.savedmodel import get_signature

    calibration = choose_calibration(
        get_signature(pulled.path, config.signature, policy=config.security.scan_policy()),
        settings.calibration_samples,
        calibration_data=config.calibration.data, eval_data=config.evaluation.data,
        fetch=lambda location: local_data_file(location, config, step_dir))
    if not calibration.synthetic:
        log.info("optimize: int8 candidates calibrate on %d rows of %s",
                 len(calibration.feeds), calibration.source)
    return calibration
