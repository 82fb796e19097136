"""Relaxed graph-substitution search (MetaFlow, Jia et al. MLSys 2019) over a frozen model.

Greedy rewriting accepts a substitution only when it makes the graph cheaper, and so misses
wins that need a slower step first (enlarging a 1x1 convolution to 3x3 costs more alone, but
lets it merge with a sibling 3x3 convolution). The relaxed search keeps every equivalent graph
whose cost stays below ``alpha`` times the best found so far:

1. a priority queue holds candidate graphs ordered by cost (ties: the order they were found);
2. the cheapest is popped and every match of every rule is applied to it;
3. each new graph is validated, dropped if seen before (canonical hash) or too large, costed,
   and queued when its cost is below ``alpha`` x the best cost; the best is updated;
4. the search stops after ``budget`` expansions, ``time_budget`` seconds, or an empty queue.

``alpha = 1`` is the greedy baseline (a candidate must be strictly cheaper than the best).
Every queued candidate carries its trace (the substitutions that made it, with the cost after
each), so the best graph's history is known. Rules are trusted to be equivalences, but the
search never returns a graph whose outputs differ from the input's beyond the tolerance: the
best is checked with :func:`tfopt.optimizer.verify.equivalence.compare`, then the next best kept candidates,
and finally the input itself is returned.

The canonical hash is :mod:`tfopt.optimizer.search.hashing`; timing the best candidates end to end,
when the cost model may misrank them, is :mod:`tfopt.optimizer.search.remeasure`.

Deterministic for a fixed seed with a deterministic cost (the fake costs of the tests, the op
cost model with a warm cache): rules list matches in a fixed order, ties in the queue are broken
by insertion order, and the only randomness (generated inputs) is seeded.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace

from tfopt.optimizer.graph.validate import InvalidGraphError, validate_graph
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.records import record_to_dict
from tfopt.optimizer.search.cost import CostFunction
from tfopt.optimizer.search.hashing import canonical_hash
from tfopt.optimizer.search.settings import (
    DEFAULT_ALPHA,
    DEFAULT_BUDGET,
    DEFAULT_TIME_BUDGET_SECONDS,
)
from tfopt.optimizer.search.substitution import Substitution
from tfopt.optimizer.transforms.pipeline import context_for
from tfopt.optimizer.verify.tolerance import Tolerance

log = logging.getLogger(__name__)

PROGRESS_EVERY_SECONDS = 5.0


@dataclass(frozen=True)
class SubstitutionStep:
    """One step of a search's trace: the substitution applied, and the graph's cost after it."""

    substitution: str
    cost: float

    def to_dict(self) -> dict:
        return record_to_dict(self)


@dataclass(frozen=True)
class QueuedGraph:
    """A graph the search reached and queued: its cost, the substitutions that led to it from
    the input, its canonical hash, and when it was found. Not a candidate of the pipeline's
    (:class:`tfopt.optimizer.candidates.candidate.Candidate`): the search's frontier entry."""

    graph_def: object = field(repr=False)
    cost: float
    trace: tuple[SubstitutionStep, ...]
    hash: str
    order: int  # when it was found: breaks ties in cost, deterministically

    @property
    def sort_key(self) -> tuple[float, int]:
        return (self.cost, self.order)


@dataclass(frozen=True)
class SearchProgress:
    expansions: int
    queue_size: int
    best_cost: float
    elapsed_seconds: float


@dataclass
class SearchStats:
    expansions: int = 0
    generated: int = 0  # graphs the rules produced
    kept: int = 0  # queued: cost below alpha x best
    duplicates: int = 0  # skipped: canonical hash seen before
    invalid: int = 0  # skipped: dangling inputs or duplicate names
    oversized: int = 0  # skipped: more than max_nodes_factor x (the input's nodes + growth)
    failed: int = 0  # a rule's matches() or apply() raised
    dropped: int = 0  # queued but pruned when the queue outgrew max_queue
    wall_seconds: float = 0.0
    stopped_by: str = ""  # "budget", "time_budget" or "exhausted"

    def to_dict(self) -> dict:
        return dict(vars(self))


@dataclass(frozen=True)
class SearchResult:
    """The graph to use, what it costs, and how the search got there.

    ``returned`` says which graph ``model`` holds: ``"best"`` (the cheapest found),
    ``"fallback"`` (the best failed the equivalence check; the next best that passed),
    ``"input"`` (nothing cheaper passed), ``"remeasured"``
    (:func:`tfopt.optimizer.search.remeasure.remeasure` found another candidate faster end to end),
    or the name of the incumbent ``remeasure`` was given (e.g. ``"greedy"``: nothing measured
    faster than greedy's graph). ``rejected`` lists the candidates that failed the check, with
    the gap. ``kept`` are the cheapest few graphs kept (the returned one among them unless it is
    the input), for ``remeasure``.
    """

    model: FrozenModel
    cost: float
    trace: tuple[SubstitutionStep, ...]
    input_cost: float
    cost_name: str
    alpha: float
    returned: str
    rejected: tuple[str, ...]
    equivalence: str
    stats: SearchStats
    kept: tuple[QueuedGraph, ...] = field(repr=False)
    measured_seconds: float | None = None
    measured: tuple[tuple[str, float, float], ...] = ()  # (which, model cost, measured p50)

    @property
    def substitutions(self) -> list[str]:
        return [step.substitution for step in self.trace]

    def to_dict(self) -> dict:
        return {
            "cost_name": self.cost_name, "alpha": self.alpha, "input_cost": self.input_cost,
            "cost": self.cost, "returned": self.returned, "rejected": list(self.rejected),
            "equivalence": self.equivalence, "trace": [s.to_dict() for s in self.trace],
            "stats": self.stats.to_dict(), "measured_seconds": self.measured_seconds,
            "measured": [{"graph": w, "model_cost": c, "measured_seconds": m}
                         for w, c, m in self.measured],
        }


def relaxed_search(
    model: FrozenModel,
    rules: Sequence[Substitution] | None,
    cost: CostFunction,
    alpha: float = DEFAULT_ALPHA,
    budget: int = DEFAULT_BUDGET,
    time_budget: float = DEFAULT_TIME_BUDGET_SECONDS,
    max_nodes_factor: float = 2.0,
    seed: int = 0,
    progress: Callable[[SearchProgress], None] | None = None,
    tolerance: Tolerance | None = None,
    keep_best: int = 5,
    max_queue: int = 64,
    protected: Sequence[str] = (),
) -> SearchResult:
    """Search for the cheapest graph equivalent to ``model``'s under ``cost``.

    ``rules`` defaults to every registered rule. ``cost`` has ``cost(graph_def) -> float`` and a
    ``name``. ``keep_best`` candidates are remembered for the equivalence fallback. The queue
    holds whole GraphDefs, so it is pruned to its ``max_queue`` cheapest when it grows to twice
    that (the pruned count is in the stats).
    """
    if alpha < 1:
        raise ValueError(f"alpha must be >= 1, got {alpha}")
    if rules is None:
        from tfopt.optimizer.search.rules import all_rules

        rules = all_rules()
    tolerance = tolerance or Tolerance()
    context = context_for(model, protected)
    started = time.perf_counter()
    stats = SearchStats()
    counter = itertools.count()
    # Twice the input's size, plus what rules that add whole subgraphs (unrolling) may add.
    max_nodes = max_nodes_factor * (len(model.graph_def.node) + sum(
        rule.growth(model.graph_def, context) for rule in rules))

    start = QueuedGraph(model.graph_def, cost.cost(model.graph_def), (),
                      canonical_hash(model.graph_def), next(counter))
    best = start
    best_few: list[QueuedGraph] = []  # cheapest kept candidates, sorted by sort_key
    seen = {start.hash}
    queue = [(start.sort_key, start)]
    next_report = started + PROGRESS_EVERY_SECONDS

    def out_of_time() -> bool:
        return time.perf_counter() - started >= time_budget

    def report(force: bool = False) -> None:
        nonlocal next_report
        now = time.perf_counter()
        if progress and (force or now >= next_report):
            progress(SearchProgress(stats.expansions, len(queue), best.cost, now - started))
            next_report = now + PROGRESS_EVERY_SECONDS

    while True:
        stats.stopped_by = stop_reason(queue, stats.expansions, budget, out_of_time)
        if stats.stopped_by:
            break
        _, current = heapq.heappop(queue)
        stats.expansions += 1
        for child_graph, description in _children(current.graph_def, rules, context, stats):
            if out_of_time():
                break
            stats.generated += 1
            try:
                validate_graph(child_graph, description)
            except InvalidGraphError as exc:
                stats.invalid += 1
                log.debug("dropping an invalid graph: %s", exc)
                continue
            if len(child_graph.node) > max_nodes:
                stats.oversized += 1
                continue
            digest = canonical_hash(child_graph)
            if digest in seen:
                stats.duplicates += 1
                continue
            seen.add(digest)
            child_cost = cost.cost(child_graph)
            if not child_cost < alpha * best.cost:
                continue
            child = QueuedGraph(child_graph, child_cost,
                              current.trace + (SubstitutionStep(description, child_cost),),
                              digest, next(counter))
            stats.kept += 1
            heapq.heappush(queue, (child.sort_key, child))
            if len(queue) >= 2 * max_queue:
                stats.dropped += len(queue) - max_queue
                queue = heapq.nsmallest(max_queue, queue)
                heapq.heapify(queue)
            best_few = sorted(best_few + [child], key=lambda c: c.sort_key)[:keep_best]
            if child.cost < best.cost:
                best = child
                log.debug("best cost %.6g after %s", best.cost, description)
            report()
        report()
    stats.wall_seconds = time.perf_counter() - started
    report(force=True)
    log.info("search (alpha %g, %s): %d expansions, %d generated, %d kept, %d duplicates in "
             "%.1fs; cost %.6g -> %.6g", alpha, cost.name, stats.expansions, stats.generated,
             stats.kept, stats.duplicates, stats.wall_seconds, start.cost, best.cost)
    return _checked_result(model, start, best_few, stats, cost.name, alpha, tolerance, seed)


def stop_reason(queue, expansions: int, budget: int, out_of_time: Callable[[], bool]) -> str:
    """Why a queue search stops now (``""``: it goes on): an empty queue (``"exhausted"``),
    ``budget`` expansions made, or its time up (``"time_budget"``). The substitution search and
    the precision search (:mod:`tfopt.optimizer.search.precision.search`) stop alike."""
    if not queue:
        return "exhausted"
    if expansions >= budget:
        return "budget"
    return "time_budget" if out_of_time() else ""


def greedy_search(model: FrozenModel, rules: Sequence[Substitution] | None, cost: CostFunction,
                  **kwargs) -> SearchResult:
    """The baseline: a substitution is kept only when it makes the graph strictly cheaper."""
    return relaxed_search(model, rules, cost, alpha=1.0, **kwargs)


def _children(graph_def, rules: Sequence[Substitution], context, stats: SearchStats):
    """Every graph one substitution away, with the substitution's description, in rule order
    then match order; for a rule that ``commutes``, first the graph with all its disjoint
    matches applied. A rule that raises is counted and skipped, never fatal."""
    for rule in rules:
        try:
            matches = rule.matches(graph_def, context)
        except Exception as exc:  # noqa: BLE001 - one broken rule must not end the search
            stats.failed += 1
            log.warning("rule %s failed to match: %s", rule.name, exc)
            continue
        if rule.commutes and len(matches) > 1:
            try:
                yield _apply_disjoint(rule, graph_def, matches, context)
            except Exception as exc:  # noqa: BLE001
                stats.failed += 1
                log.warning("rule %s failed to apply at all its matches: %s", rule.name, exc)
        for match in matches:
            try:
                child = rule.apply(graph_def, match, context)
            except Exception as exc:  # noqa: BLE001
                stats.failed += 1
                log.warning("rule %s failed to apply at %s: %s", rule.name, match.describe(),
                            exc)
                continue
            yield child, match.describe()


def _apply_disjoint(rule: Substitution, graph_def, matches, context) -> tuple[object, str]:
    """``rule`` applied at every match that shares no node with one applied before it."""
    used: set[str] = set()
    applied = 0
    for match in matches:
        if used.intersection(match.nodes):
            continue
        graph_def = rule.apply(graph_def, match, context)
        used.update(match.nodes)
        applied += 1
    return graph_def, f"{rule.name}(all {applied} matches)"


def _checked_result(model: FrozenModel, start: QueuedGraph, best_few: list[QueuedGraph],
                    stats: SearchStats, cost_name: str, alpha: float, tolerance: Tolerance,
                    seed: int) -> SearchResult:
    """The cheapest candidate that beats the input and passes the equivalence check."""
    rejected, rejected_hashes = [], set()
    cheaper = [c for c in best_few if c.cost < start.cost]
    for rank, candidate in enumerate(cheaper):
        summary, broken = check_equivalence(model, candidate.graph_def, tolerance, seed)
        if not broken:
            returned = "best" if rank == 0 else "fallback"
            return _result(model, candidate, start, returned, rejected, summary,
                           stats, cost_name, alpha, best_few, rejected_hashes)
        rejected_hashes.add(candidate.hash)
        rejected.append(f"{' -> '.join(s.substitution for s in candidate.trace)}: {broken}")
        log.warning("search candidate (cost %.6g) fails the equivalence check (%s); trying the "
                    "next", candidate.cost, broken)
    return _result(model, start, start, "input", rejected, "input graph returned unchanged",
                   stats, cost_name, alpha, best_few, rejected_hashes)


def check_equivalence(model: FrozenModel, graph_def, tolerance: Tolerance,
                 seed: int) -> tuple[str, str]:
    """(the comparison's summary, what it broke: empty when within tolerance). A candidate
    that cannot even run counts as broken."""
    from tfopt.optimizer.verify.equivalence import compare

    try:
        report = compare(model, model.with_graph(graph_def), seed=seed)
    except Exception as exc:  # noqa: BLE001 - a graph TF cannot run is not equivalent
        return "", f"does not run: {exc}"
    return report.summary(), "; ".join(tolerance.violations(report))


def _result(model, chosen: QueuedGraph, start: QueuedGraph, returned: str, rejected: list[str],
            equivalence: str, stats, cost_name, alpha, best_few,
            rejected_hashes: set[str]) -> SearchResult:
    kept = tuple(c for c in best_few if c.hash not in rejected_hashes)
    step = f"search(alpha={alpha:g}, {len(chosen.trace)} substitutions)"
    return SearchResult(
        model=model if chosen is start else model.with_graph(chosen.graph_def, step=step),
        cost=chosen.cost, trace=chosen.trace, input_cost=start.cost, cost_name=cost_name,
        alpha=alpha, returned=returned, rejected=tuple(rejected), equivalence=equivalence,
        stats=stats, kept=kept)


def continued_from(first: SearchResult, then: SearchResult) -> SearchResult:
    """``then`` (a search started from ``first``'s graph) as one search from ``first``'s input:
    traces joined, costs and stats relative to that input. When ``then`` found nothing
    better, the graph is ``first``'s and so is ``returned``."""
    if first.returned == "input":
        return then
    kept = tuple(replace(c, trace=first.trace + c.trace) for c in then.kept)
    stats = SearchStats(**{f.name: getattr(first.stats, f.name) + getattr(then.stats, f.name)
                           for f in fields(SearchStats) if f.name != "stopped_by"},
                        stopped_by=then.stats.stopped_by)
    returned = then.returned if then.returned != "input" else first.returned
    return replace(then, trace=first.trace + then.trace, input_cost=first.input_cost,
                   returned=returned, kept=kept, stats=stats,
                   rejected=first.rejected + then.rejected)
