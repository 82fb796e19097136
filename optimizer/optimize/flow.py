"""SavedModel in, optimized SavedModel out, with the evidence: the flow behind ``tfopt optimize``.

1. freeze one signature of the source into a :class:`FrozenModel`;
2. make a candidate from it: a recipe's transforms run in order (by this package or by TF's
   native GTT, each step traced), or a graph-substitution search (``greedy`` or ``relaxed``, see
   :mod:`tfopt.optimizer.search.search`) finds the cheapest equivalent graph, traced substitution by
   substitution;
3. run the *source SavedModel* and the candidate on the same inputs and compare the outputs;
4. write the candidate only if it stays within the tolerance.

The CLI and the pipeline components call these functions, so they check and write the same way.
Nothing is written by :func:`optimize`; :func:`write_optimized` refuses a diverging result.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.errors import EquivalenceError
from tfopt.optimizer.inputs.generated import infer_int_ranges, make_inputs
from tfopt.optimizer.inputs.vocabulary import infer_vocabularies
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.optimize.recipe import BACKENDS, Recipe
from tfopt.optimizer.optimize.recipe_building import build_transforms
from tfopt.optimizer.optimize.worker import copy_written, optimize_in_worker
from tfopt.optimizer.search.settings import SearchSettings
from tfopt.optimizer.transforms.base import TransformConfigError
from tfopt.optimizer.transforms.pipeline import run_transforms
from tfopt.optimizer.verify.equivalence import EquivalenceReport, compare
from tfopt.optimizer.verify.finite import refuse_nonfinite_source
from tfopt.optimizer.verify.tolerance import Tolerance

log = logging.getLogger(__name__)

DEFAULT_BACKEND = "python"
EQUIVALENCE_BATCHES = 3
EQUIVALENCE_BATCH_SIZE = 2
STRATEGIES = ("recipe", "greedy", "relaxed")
SEARCH_BACKEND = "search"
# The search's queue holds whole GraphDefs (up to twice its cap); with the weights inline a
# ResNet50 is ~100 MB, and the default cap of 64 took 23 GB before the OOM killer stopped it.
SEARCH_QUEUE_BYTES = 2 * 1024**3
SEARCH_MAX_QUEUE = 64


@dataclass(frozen=True)
class OptimizedGraph:
    """The frozen original after a recipe or a search, and how it was made: what
    :func:`optimize` checks against the source (not yet a candidate of the pipeline's,
    :class:`tfopt.optimizer.candidates.candidate.Candidate`, which is a model on disk to measure).

    For a recipe, ``recipe`` is its GTT text and ``trace`` holds one
    :class:`~tfopt.optimizer.transforms.pipeline.TransformStep` per transform. For a search, ``recipe``
    describes the search (``relaxed(alpha=1.05)``), ``backend`` is ``search``, ``trace`` holds
    one :class:`~tfopt.optimizer.search.search.SubstitutionStep` (substitution, cost after it) per
    applied substitution, and ``search`` the whole :meth:`SearchResult.to_dict` (stats, which
    graph was returned, the end-to-end re-measurements). Both kinds of step have ``to_dict``.
    """

    model: FrozenModel
    recipe: str
    backend: str
    trace: tuple
    search: dict | None = None


@dataclass(frozen=True)
class OptimizeResult:
    source: str
    original: FrozenModel
    candidate: OptimizedGraph
    report: EquivalenceReport
    tolerance: Tolerance

    @property
    def accepted(self) -> bool:
        return self.tolerance.accepts(self.report)

    def divergence(self) -> str:
        """One line saying how far the outputs are off, for a refusal."""
        broken = "; ".join(self.tolerance.violations(self.report)) or self.report.summary()
        return f"optimized outputs differ from {self.source}: {broken}; nothing written"

    def provenance(self) -> dict:
        """What ``assets.extra/tfopt.json`` of the written model records about this step."""
        return {
            "recipe": self.candidate.recipe,
            "backend": self.candidate.backend,
            "trace": [step.to_dict() for step in self.candidate.trace],
            **({"search": self.candidate.search} if self.candidate.search is not None else {}),
            "equivalence": self.report.to_dict(),
            "tolerance": self.tolerance.to_dict(),
        }

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "signature": self.original.signature.to_dict(),
            "recipe": self.candidate.recipe,
            "backend": self.candidate.backend,
            "accepted": self.accepted,
            "tolerance": self.tolerance.to_dict(),
            "equivalence": self.report.to_dict(),
            "graph": {
                "nodes_before": len(self.original.graph_def.node),
                "nodes_after": len(self.candidate.model.graph_def.node),
                "bytes_before": self.original.size_bytes,
                "bytes_after": self.candidate.model.size_bytes,
                "ops_before": dict(self.original.op_counts()),
                "ops_after": dict(self.candidate.model.op_counts()),
            },
            "trace": [step.to_dict() for step in self.candidate.trace],
            **({"search": self.candidate.search} if self.candidate.search is not None else {}),
        }


def resolve_backend(recipe: Recipe, backend: str | None) -> str:
    chosen = backend or recipe.backend or DEFAULT_BACKEND
    if chosen not in BACKENDS:
        raise TransformConfigError(f"unknown backend '{chosen}'; valid: {', '.join(BACKENDS)}")
    return chosen


def check_recipe(recipe: Recipe, backend: str | None = None) -> None:
    """Fail on an empty recipe, an unknown transform or parameter, before any model is loaded."""
    if not recipe.transforms:
        raise TransformConfigError(f"the recipe{f' in {recipe.source}' if recipe.source else ''}"
                                   f" names no transforms")
    if resolve_backend(recipe, backend) == "python":
        build_transforms(recipe.transforms)
    else:
        from tfopt.optimizer.optimize.native_gtt import native_transforms

        native_transforms(recipe.transforms)


def apply_recipe(model: FrozenModel, recipe: Recipe, backend: str | None = None) -> OptimizedGraph:
    """The recipe's transforms applied in order to ``model``; each step in the trace."""
    check_recipe(recipe, backend)
    chosen = resolve_backend(recipe, backend)
    if chosen == "python":
        optimized, trace = run_transforms(model, build_transforms(recipe.transforms))
    else:
        from tfopt.optimizer.optimize.native_gtt import run_native_transforms

        optimized, trace = run_native_transforms(model, recipe.transforms)
    return OptimizedGraph(model=optimized, recipe=recipe.text, backend=chosen, trace=tuple(trace))


def search_candidate(model: FrozenModel, tolerance: Tolerance | None = None,
                     cost_cache: str | os.PathLike | None = None,
                     **settings) -> OptimizedGraph:
    """The cheapest graph equivalent to ``model``'s that a substitution search finds, searching
    as ``settings`` (:class:`SearchSettings`' keys and defaults) say.

    ``greedy`` keeps only strictly cheaper graphs (alpha = 1); ``relaxed`` keeps graphs up to
    ``alpha`` x the best cost. ``cost`` is ``model`` (TASO-style per-op cost model, cached in
    ``cost_cache``, default ``$TFOPT_OP_COST_CACHE`` or ``~/.cache/tfopt/op_costs.json``) or
    ``measured`` (every candidate timed end to end: slow). Every registered rule is used, after
    :data:`SEARCH_CLEANUP` (free rewrites, one pass each, first in the trace). With
    ``remeasure_top`` > 0 the returned graph, the input and the next cheapest candidates are
    timed end to end, interleaved, and one that passes the equivalence check replaces the
    returned graph when it is measured faster with confidence (the cost model can misrank
    graphs). A relaxed search with re-measurement runs greedy
    first and keeps greedy's graph unless its own is measured faster with confidence (see
    :func:`tfopt.optimizer.search.remeasure.remeasure`).
    """
    return _search(model, SearchSettings(**settings), tolerance or Tolerance(), cost_cache)


# Free rewrites done once before the search, each in one pass. Left to the search, every subset
# of the removable Identity nodes and mergeable duplicates is a distinct graph of the same cost,
# and on a Keras graph those equal-cost variants fill the queue (and its pruning) ahead of any
# slightly costlier step: the relaxed search then never expands the step it exists for.
# Batch-norm folding is done here too, for the same reason: each fold is cheaper on its own and
# independent of the others, so the search would spend one expansion per batch norm (53 in
# ResNet50, each expansion costing every other fold as a child) before reaching the merges and
# enlargements whose trade-offs it is for. The fold_conv_batchnorm rule still applies to what
# this pass leaves (a batch norm it cannot fold in one pass).
SEARCH_CLEANUP = ("remove_nodes(op=Identity, op=Snapshot, op=StopGradient) merge_duplicate_nodes "
                  "fold_batch_norms")

# Of a relaxed search's time budget, what the greedy run it continues from may use at most.
GREEDY_SHARE_OF_TIME = 0.5


def _search(model: FrozenModel, settings: SearchSettings, tolerance: Tolerance,
            cost_cache=None) -> OptimizedGraph:
    from tfopt.optimizer.search.cost import MeasuredCost, OpCostModel
    from tfopt.optimizer.search.remeasure import remeasure
    from tfopt.optimizer.search.search import SubstitutionStep, continued_from, relaxed_search

    cost = OpCostModel(cache_path=cost_cache) if settings.cost == "model" else MeasuredCost(model)
    input_cost = cost.cost(model.graph_def)
    cleanup = []
    cleaned = model
    for transform in build_transforms(Recipe.from_string(SEARCH_CLEANUP).transforms):
        cleaned, _ = run_transforms(cleaned, [transform])
        cleanup.append(SubstitutionStep(f"cleanup:{transform.describe()}",
                                        cost.cost(cleaned.graph_def)))
    model = cleaned

    def progress(p) -> None:
        log.info("search: %d expansions, %d queued, best cost %.4g, %.0fs", p.expansions,
                 p.queue_size, p.best_cost, p.elapsed_seconds)

    log.info("search: %s, budget %d expansions / %gs", settings.describe(), settings.budget,
             settings.time_budget)
    max_queue = max(4, min(SEARCH_MAX_QUEUE,
                           SEARCH_QUEUE_BYTES // (2 * max(model.graph_def.ByteSize(), 1))))
    started = time.perf_counter()
    greedy = None
    start = model
    budget, time_budget = settings.budget, settings.time_budget
    if settings.alpha > 1.0 and settings.remeasure_top > 0:
        # Relaxed continues from greedy's graph, and greedy's graph is the one to beat: the
        # relaxed result replaces it only when measured faster with confidence, so relaxed is
        # never slower than greedy. Greedy keeps only strictly cheaper graphs, so it usually
        # exhausts its queue in a fraction of the budget.
        log.info("search: greedy first; the relaxed search continues from its graph")
        greedy = relaxed_search(model, None, cost, alpha=1.0, budget=settings.budget,
                                time_budget=settings.time_budget * GREEDY_SHARE_OF_TIME,
                                progress=progress, tolerance=tolerance, max_queue=max_queue)
        start = greedy.model
        budget = max(1, settings.budget - greedy.stats.expansions)
        time_budget = max(settings.time_budget - (time.perf_counter() - started),
                          settings.time_budget * (1 - GREEDY_SHARE_OF_TIME))
    result = relaxed_search(start, None, cost, alpha=settings.alpha, budget=budget,
                            time_budget=time_budget, progress=progress,
                            tolerance=tolerance, max_queue=max_queue)
    if greedy is not None:
        result = continued_from(greedy, result)
    if settings.remeasure_top > 0:
        result = remeasure(result, model, top_k=settings.remeasure_top, tolerance=tolerance,
                           incumbent=("greedy", greedy) if greedy is not None else None)
    trace = tuple(cleanup) + tuple(result.trace)
    # The search started from the cleaned-up graph ("input" in its result means that graph);
    # the report's input cost and trace start from the frozen model.
    search = {**result.to_dict(), "input_cost": input_cost,
              "trace": [step.to_dict() for step in trace], "cleanup": SEARCH_CLEANUP,
              "greedy_baseline": greedy.to_dict() if greedy is not None else None}
    return OptimizedGraph(model=result.model, recipe=settings.describe(), backend=SEARCH_BACKEND,
                     trace=trace, search=search)


def evaluate(
    source: str | os.PathLike,
    original: FrozenModel,
    candidate: OptimizedGraph,
    tolerance: Tolerance,
    signature_name: str = DEFAULT_SIGNATURE,
    *,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> OptimizeResult:
    """Compare the source SavedModel (scanned under ``policy``) with the candidate on inputs
    made from the signature."""
    # Integer ids are drawn from the embedding sizes, and tokens from the lookup tables, found in
    # the original graph: a candidate's rewritten graph may no longer show them.
    return check_equivalence(source, original, equivalence_inputs(original), candidate,
                             tolerance, signature_name, policy=policy)


def equivalence_inputs(original: FrozenModel) -> list[dict]:
    """The batches :func:`evaluate` feeds both models, made from the frozen original."""
    int_ranges = infer_int_ranges(original.graph_def, original.signature)
    vocabularies = infer_vocabularies(original.graph_def, original.signature)
    return [make_inputs(original.signature, EQUIVALENCE_BATCH_SIZE, seed, int_ranges,
                        vocabularies=vocabularies)
            for seed in range(EQUIVALENCE_BATCHES)]


def check_equivalence(source: str | os.PathLike, original: FrozenModel, inputs: list[dict],
                      candidate: OptimizedGraph, tolerance: Tolerance,
                      signature_name: str = DEFAULT_SIGNATURE, load_candidate=None, *,
                      policy: ScanPolicy = DEFAULT_POLICY) -> OptimizeResult:
    """:func:`evaluate` on inputs already made (the original may be an outline by then);
    ``load_candidate(frozen model)`` makes the candidate's runner (default: ``load_runner``)."""
    report = compare(str(source), candidate.model, inputs, signature_name=signature_name,
                     load_candidate=load_candidate, policy=policy)
    refuse_nonfinite_source(report.original_nan_values, report.original_inf_values,
                            str(source), "inputs generated from its signature")
    log.info("equivalence: %s", report.summary())
    return OptimizeResult(source=str(source), original=original, candidate=candidate,
                          report=report, tolerance=tolerance)


def optimize(
    source: str | os.PathLike,
    recipe: Recipe | str | None,
    signature_name: str = DEFAULT_SIGNATURE,
    tolerance: Tolerance | None = None,
    backend: str | None = None,
    search: SearchSettings | None = None,
    *,
    in_worker: bool | None = None,
    policy: ScanPolicy = DEFAULT_POLICY,
) -> OptimizeResult:
    """Freeze ``source``, apply ``recipe`` (or run ``search``), and measure the candidate against
    ``source``.

    ``tolerance`` and ``backend`` default to the recipe's own (from a recipe file), then to
    :class:`Tolerance` ``()`` and ``python``. With ``search`` the recipe is ignored (pass
    ``None``) and the search's candidate is checked the same way. Nothing is written; see
    :func:`write_optimized`.

    A model of :data:`~tfopt.optimizer.model.footprint.WORKERS_FROM_BYTES` or more on disk is optimized in
    a worker process (``in_worker``, default by size; :mod:`tfopt.optimizer.optimize.worker`): freezing
    and transforming hold several copies of the weights, which TensorFlow does not give back
    to the system while its process lives. The result is then the same, but its graphs are
    outlines (no weights) and the optimized model is kept on disk until the result is gone.

    ``policy``: what the source may hold (:mod:`tfopt.optimizer.model.op_scan`), applied to every
    read of it, in this process or the worker.
    """
    if search is not None:
        tolerance = tolerance or Tolerance()
    else:
        if recipe is None:
            raise TransformConfigError("give a recipe, or search settings")
        if isinstance(recipe, str):
            recipe = Recipe.from_string(recipe)
        check_recipe(recipe, backend)
        tolerance = tolerance or recipe.tolerance or Tolerance()
    if in_worker is None:
        from tfopt.optimizer.model.footprint import builds_in_workers

        in_worker = builds_in_workers(source)
    if in_worker:
        return optimize_in_worker(source, recipe, signature_name, tolerance, backend, search,
                                  policy=policy)
    return optimize_here(source, recipe, signature_name, tolerance, backend, search,
                         policy=policy)


def optimize_here(source: str | os.PathLike, recipe: Recipe | None, signature_name: str,
                  tolerance: Tolerance, backend: str | None, search: SearchSettings | None,
                  on_frozen=None, *, policy: ScanPolicy = DEFAULT_POLICY) -> OptimizeResult:
    """:func:`optimize` in this process, its settings resolved. ``on_frozen(original)``, when
    given, returns what the result keeps of the original (an outline, say): the frozen
    original is then let go before the candidate is checked."""
    from tfopt.optimizer.model.freeze import freeze

    original = freeze(source, signature_name, policy=policy)
    inputs = equivalence_inputs(original)
    kept = original
    if on_frozen is not None:
        from tfopt.optimizer.system.free_memory import return_freed_memory

        kept = on_frozen(original)
        # freezing's copies (the loaded SavedModel, the converter's graphs) are garbage now:
        # handed back, the transforms' copies reuse those pages instead of adding their own
        return_freed_memory()
    candidate = (_search(original, search, tolerance) if search is not None
                 else apply_recipe(original, recipe, backend))
    del original
    if on_frozen is None:
        return check_equivalence(source, kept, inputs, candidate, tolerance, signature_name,
                                 policy=policy)
    from tfopt.optimizer.runtime.tensorflow import frozen_session_runner

    return_freed_memory()  # the original and every intermediate graph, before the check
    # the graph imported into a session holds about two copies of the weights less than
    # as a function (:func:`frozen_session_runner`)
    return check_equivalence(source, kept, inputs, candidate, tolerance, signature_name,
                             load_candidate=frozen_session_runner, policy=policy)


def write_optimized(result: OptimizeResult, dst: str | os.PathLike,
                    overwrite: bool = False) -> Path:
    """Write the candidate as a SavedModel with the source's signature, if it was accepted."""
    from tfopt.optimizer.model.export import write_saved_model

    if not result.accepted:
        raise EquivalenceError(result.divergence())
    written = getattr(result.candidate.model, "written", None)
    if written is not None:  # optimized in a worker, which wrote it: a copy of the files
        return copy_written(written, dst, overwrite=overwrite)
    return write_saved_model(result.candidate.model, dst, overwrite=overwrite,
                             metadata=result.provenance())
