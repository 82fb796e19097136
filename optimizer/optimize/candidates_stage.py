"""The candidates stage: from the optimized graph to every candidate the targets allow, the
mixed-precision ones included. The pipeline's ``optimize`` step (its part ``candidates``) and
``tfopt optimize --targets`` both call :func:`build_candidates`.

Three things, in this order:

1. the calibration set, when a candidate calibrates (a uniform int8 flavour, or a precision
   search): the calibration data's inputs, else the eval data's, else inputs generated from
   the signature (:func:`tfopt.optimizer.inputs.calibration.choose_calibration`);
2. the candidates :class:`~tfopt.optimizer.candidates.build.CandidateSettings` allows
   (:func:`tfopt.optimizer.candidates.build.derive_candidates`);
3. the precision search for each target that has a mixed int8 candidate
   (:func:`tfopt.optimizer.search.precision.candidates.mixed_candidate`), held to the gate's
   accuracy budget. A search that fails leaves the other candidates to the gate.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings

if TYPE_CHECKING:
    from tfopt.optimizer.candidates.build import CandidateSettings
    from tfopt.optimizer.candidates.candidate import Candidate, Skipped
    from tfopt.optimizer.inputs.calibration import Calibration
    from tfopt.optimizer.model.frozen import FrozenModel
    from tfopt.optimizer.search.precision.candidates import PrecisionOutcome
    from tfopt.optimizer.system.memory_budget import MemoryBudget
    from tfopt.optimizer.verify.evaluation import LabelledData

log = logging.getLogger(__name__)

STAGES = ("candidates", "precision search")  # what ``around`` is entered with, in order


@dataclass
class BuiltCandidates:
    """What the stage built: the candidates (mixed int8 ones last), those not built and why,
    and the outcome of each precision search that ran, by its candidate's label (a search that
    was off for this model is not among them)."""

    candidates: list[Candidate]
    skipped: list[Skipped]
    precision: dict[str, PrecisionOutcome] = field(default_factory=dict)
    calibration: Calibration | None = None


def describe_outcome(label: str, outcome: PrecisionOutcome) -> str:
    """One line on what the search for ``label`` did (``tfopt optimize`` prints it, the
    pipeline logs it)."""
    if outcome.strategy == "off":
        return f"{label} off: {outcome.reason}"
    if outcome.candidate is not None:
        return (f"{outcome.strategy}: {label} keeps {len(outcome.candidate.float_layers)} of "
                f"{len(outcome.table.layers)} layers in float "
                f"({', '.join(outcome.candidate.float_layers)}); "
                f"{len(outcome.result.tried)} assignments measured in "
                f"{outcome.search_seconds:.1f}s")
    return f"{outcome.strategy}: no {label} ({outcome.reason})"


def build_candidates(
    source: str | os.PathLike,
    optimized: FrozenModel,
    workdir: str | os.PathLike,
    settings: CandidateSettings,
    *,
    signature: str = DEFAULT_SIGNATURE,
    precision: PrecisionSearchSettings | None = None,
    accuracy_budget: float | None = None,
    calibration_data: str | os.PathLike | None = None,
    eval_data_file: str | os.PathLike | None = None,
    fetch: Callable[[str], Path] | None = None,
    eval_data: LabelledData | None = None,
    metric: str = "top1",
    source_digest: str | None = None,
    budget: MemoryBudget | None = None,
    policy: ScanPolicy = DEFAULT_POLICY,
    around: Callable[[str], AbstractContextManager] | None = None,
    on_precision: Callable[[str, PrecisionOutcome], None] | None = None,
) -> BuiltCandidates:
    """Every candidate ``settings`` allows, built from ``optimized`` (the float32 graph, already
    checked against ``source``) under ``workdir``, and the mixed int8 ones ``precision``
    searches for (default: :class:`PrecisionSearchSettings`'s).

    ``calibration_data`` / ``eval_data_file``: where int8 candidates calibrate (``fetch`` turns
    a location that is not a local path, ``s3://...``, into a local file); ``eval_data`` (with
    its ``metric``): the labelled data the precision search measures its error on, held to
    ``accuracy_budget`` (None: no bound, so uniform int8 passes and ``auto`` searches nothing).
    ``around(stage)`` is entered around each of :data:`STAGES`; ``on_precision(label,
    outcome)`` sees every search's outcome, an ``off`` one included.
    """
    from tfopt.optimizer.candidates.build import derive_candidates
    from tfopt.optimizer.errors import first_line
    from tfopt.optimizer.inputs.calibration import choose_calibration
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.search.precision.candidates import (
        TARGETS,
        mixed_candidate,
        searched_targets,
    )

    precision = precision or PrecisionSearchSettings()
    around = around or (lambda stage: nullcontext())
    workdir = Path(workdir)
    searched = searched_targets(settings.targets, precision.mode)
    calibration = None
    if settings.calibrates or searched:
        calibration = choose_calibration(
            get_signature(source, signature, policy=policy), settings.calibration_samples,
            calibration_data=calibration_data, eval_data=eval_data_file, fetch=fetch)
        if not calibration.synthetic:
            log.info("int8 candidates calibrate on %d rows of %s", len(calibration.feeds),
                     calibration.source)
    with around("candidates"):
        made, skipped = derive_candidates(
            source, optimized, workdir, settings, signature=signature, calibration=calibration,
            source_digest=source_digest, budget=budget, policy=policy)
    outcomes: dict[str, PrecisionOutcome] = {}
    with around("precision search"):
        built = {c.label: c.path for c in made}
        for target in searched:
            label = TARGETS[target][0]
            try:
                outcome = mixed_candidate(
                    source, workdir, precision,
                    math.inf if accuracy_budget is None else accuracy_budget,
                    signature=signature, calibration=calibration, eval_data=eval_data,
                    metric=metric, samples=settings.calibration_samples,
                    source_digest=source_digest, policy=policy, built=built, target=target)
            except Exception as exc:  # noqa: BLE001 - a search that fails leaves the others
                log.warning("precision search failed, no %s: %s", label, first_line(exc))
                continue
            log.info("precision search: %s", describe_outcome(label, outcome))
            if on_precision is not None:
                on_precision(label, outcome)
            if outcome.strategy != "off":  # nothing searched: nothing to keep
                outcomes[label] = outcome
    mixed = [o.candidate for o in outcomes.values() if o.candidate is not None]
    return BuiltCandidates(candidates=made + mixed, skipped=skipped, precision=outcomes,
                           calibration=calibration)
