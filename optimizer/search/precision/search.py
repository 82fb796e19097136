"""Search per-layer precision (int8 or float) for the fastest assignment inside an error budget.

Both searches work on a :class:`~tfopt.optimizer.search.precision.table.PrecisionTable` (measured
once) and its predictions; the few best assignments they propose are then built and measured
for real, end to end (:func:`measure_proposals`), and the fastest measured inside the budget is
returned.

- :func:`greedy_fallback` is what Intel Neural Compressor and NNCF's accuracy control do: rank
  the layers by sensitivity (the error left when the layer alone is kept in float, lowest
  first; ties broken by the error of quantizing it alone, highest first) and fall them back to
  float in that order until the budget holds. It never weighs what a layer costs, and never
  undoes a fallback.
- :func:`relaxed_precision_search` is the substitution search's queue
  (:mod:`tfopt.optimizer.search.search`: MetaFlow's relaxation) over assignments: a priority queue
  ordered by predicted latency; each popped assignment is expanded by every move (fall one
  layer back to float, quantize one float layer again, or merge two float regions by making the
  int8 layers between them float: one island and two boundaries fewer); a new assignment
  (deduplicated by its set of float layers) is queued when its predicted latency is below
  ``alpha`` x the best inside the budget found so far, so the search passes through
  assignments slower than the best (a float layer that a later move makes pay, once its
  neighbours follow or it is quantized again) and outside the budget (on the way to one inside).
  Greedy's answer is the incumbent it starts from. It stops after ``budget`` expansions,
  ``time_budget`` seconds, or on an empty queue.

Every proposal carries its trace (the moves that made it, with the predicted latency and error
after each), and every measured one its predicted and measured figures: the report shows both.
Deterministic: moves are listed in graph order and queue ties are broken by insertion order.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tfopt.optimizer.records import record_to_dict
from tfopt.optimizer.search.precision.table import Assignment, PrecisionTable
from tfopt.optimizer.search.search import SearchStats, stop_reason

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrecisionStep:
    """One move of a trace, and the assignment's predicted latency and error after it."""

    move: str
    predicted_seconds: float
    predicted_error: float


@dataclass(frozen=True)
class Proposal:
    """An assignment a search proposes: its float layers (graph order), its predictions, and
    the moves that reached it."""

    float_layers: tuple[str, ...]
    predicted_seconds: float
    predicted_error: float
    trace: tuple[PrecisionStep, ...]
    found_by: str  # "greedy" or "relaxed"

    @property
    def assignment(self) -> Assignment:
        return frozenset(self.float_layers)


@dataclass(frozen=True)
class Measured:
    seconds: float  # end to end, p50
    error: float  # on the same data and metric as the table's errors


@dataclass(frozen=True)
class Tried:
    """A proposal built and measured for real."""

    float_layers: tuple[str, ...]
    found_by: str
    predicted_seconds: float
    predicted_error: float
    measured_seconds: float
    measured_error: float
    within_budget: bool


@dataclass(frozen=True)
class PrecisionResult:
    """The chosen assignment (None: nothing measured inside the budget), how it was found, and
    every assignment built and measured."""

    strategy: str
    max_error: float
    chosen: Proposal | None
    measured: Measured | None
    tried: tuple[Tried, ...]
    stats: SearchStats
    search_seconds: float  # the search alone, the table excluded

    @property
    def float_layers(self) -> tuple[str, ...]:
        return self.chosen.float_layers if self.chosen else ()

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "max_error": self.max_error,
                "chosen": record_to_dict(self.chosen) if self.chosen else None,
                "measured": record_to_dict(self.measured) if self.measured else None,
                "tried": [record_to_dict(t) for t in self.tried],
                "stats": self.stats.to_dict(), "search_seconds": self.search_seconds}


def sensitivity_order(table: PrecisionTable) -> list[str]:
    """The layers, most sensitive first: lowest error when kept alone in float, then highest
    error when quantized alone, then graph order."""
    position = {n: i for i, n in enumerate(table.layers)}
    return sorted(table.layers, key=lambda n: (table.float_alone[n], -table.quantized_alone[n],
                                               position[n]))


def _proposal(table: PrecisionTable, assignment: Assignment, trace, found_by: str) -> Proposal:
    return Proposal(tuple(table.ordered(assignment)), table.latency(assignment),
                    table.error(assignment), tuple(trace), found_by)


def greedy_fallback(table: PrecisionTable, max_error: float, keep: int = 3) -> list[Proposal]:
    """Fall back layers in :func:`sensitivity_order` until the predicted error is within
    ``max_error``; that assignment first, then (for when measurement disagrees) the next
    ``keep - 1`` steps of the same walk. Empty when no layer's fallback is predicted to help."""
    assignment: frozenset = frozenset()
    trace: list[PrecisionStep] = []
    proposals: list[Proposal] = []
    if table.error(assignment) <= max_error:
        return [_proposal(table, assignment, trace, "greedy")]
    for layer in sensitivity_order(table):
        assignment = assignment | {layer}
        trace.append(PrecisionStep(f"float {layer}", table.latency(assignment),
                                   table.error(assignment)))
        if proposals or table.error(assignment) <= max_error:
            proposals.append(_proposal(table, assignment, trace, "greedy"))
            if len(proposals) >= keep:
                break
    return proposals


def _moves(table: PrecisionTable, assignment: Assignment):
    """(description, assignment) for every move from ``assignment``, in graph order."""
    for layer in table.layers:
        if layer in assignment:
            yield f"int8 {layer}", assignment - {layer}
        else:
            yield f"float {layer}", assignment | {layer}
    # Merge: the int8 layers strictly between two float layers (graph order) that have only int8
    # layers between them, all made float at once: one island where there were two.
    floats = [i for i, n in enumerate(table.layers) if n in assignment]
    for left, right in itertools.pairwise(floats):
        between = table.layers[left + 1:right]
        if len(between) > 1 and any(table.neighbours(n) & assignment for n in between):
            yield (f"merge {table.layers[left]}..{table.layers[right]}",
                   assignment | set(between))


def relaxed_precision_search(table: PrecisionTable, max_error: float, alpha: float = 1.1,
                             budget: int = 200, time_budget: float = 60.0, keep: int = 3,
                             incumbent: Proposal | None = None, max_queue: int = 256
                             ) -> tuple[list[Proposal], SearchStats]:
    """The ``keep`` assignments predicted fastest inside ``max_error`` that the relaxed queue
    reached (``incumbent``, greedy's answer, among them while it is one of the fastest), and
    the search's stats. See the module's docstring."""
    if alpha < 1:
        raise ValueError(f"alpha must be >= 1, got {alpha}")
    started = time.perf_counter()
    stats = SearchStats()
    counter = itertools.count()
    start: frozenset = frozenset()
    best: list[Proposal] = []  # inside the budget, fastest first
    if incumbent is not None and incumbent.predicted_error <= max_error:
        best.append(incumbent)
    if table.error(start) <= max_error:
        best.append(_proposal(table, start, (), "relaxed"))
    best.sort(key=lambda p: p.predicted_seconds)
    seen = {start} | {p.assignment for p in best}
    queue = [(table.latency(start), next(counter), start, ())]
    def out_of_time() -> bool:
        return time.perf_counter() - started >= time_budget

    while True:
        stats.stopped_by = stop_reason(queue, stats.expansions, budget, out_of_time)
        if stats.stopped_by:
            break
        _, _, current, trace = heapq.heappop(queue)
        stats.expansions += 1
        for move, child in _moves(table, current):
            stats.generated += 1
            if child in seen:
                stats.duplicates += 1
                continue
            seen.add(child)
            seconds, error = table.latency(child), table.error(child)
            bound = alpha * best[0].predicted_seconds if best else math.inf
            if not seconds < bound:
                continue
            child_trace = trace + (PrecisionStep(move, seconds, error),)
            stats.kept += 1
            heapq.heappush(queue, (seconds, next(counter), child, child_trace))
            if len(queue) >= 2 * max_queue:
                stats.dropped += len(queue) - max_queue
                queue = heapq.nsmallest(max_queue, queue)
                heapq.heapify(queue)
            if error <= max_error:
                best = sorted(best + [_proposal(table, child, child_trace, "relaxed")],
                              key=lambda p: p.predicted_seconds)[:keep]
    stats.wall_seconds = time.perf_counter() - started
    log.info("precision search (relaxed, alpha %g): %d expansions, %d generated, %d kept, %d "
             "duplicates in %.2fs; best predicted %s", alpha, stats.expansions, stats.generated,
             stats.kept, stats.duplicates, stats.wall_seconds,
             f"{best[0].predicted_seconds:.3g}s, float {list(best[0].float_layers)}"
             if best else "none inside the budget")
    return best, stats


def measure_proposals(strategy: str, proposals: Sequence[Proposal], max_error: float,
                      measure: Callable[[list[Assignment]], list[Measured]],
                      stats: SearchStats, search_seconds: float,
                      first_inside: bool = False) -> PrecisionResult:
    """Build and measure ``proposals`` for real (``measure`` takes them all at once, so that it
    can time them interleaved) and choose the fastest measured inside ``max_error``, or with
    ``first_inside`` (greedy's walk: it stops where the budget first holds) the first."""
    unique = list({p.assignment: p for p in reversed(proposals)}.values())[::-1]
    results = measure([p.assignment for p in unique]) if unique else []
    tried = tuple(Tried(p.float_layers, p.found_by, p.predicted_seconds, p.predicted_error,
                        m.seconds, m.error, m.error <= max_error)
                  for p, m in zip(unique, results))
    inside = [(m.seconds, i) for i, m in enumerate(results) if m.error <= max_error]
    if not inside:
        return PrecisionResult(strategy, max_error, None, None, tried, stats, search_seconds)
    _, index = min(inside, key=lambda pair: pair[1] if first_inside else pair)
    return PrecisionResult(strategy, max_error, unique[index], results[index], tried, stats,
                           search_seconds)


def search_precision(table: PrecisionTable, strategy: str, max_error: float,
                     measure: Callable[[list[Assignment]], list[Measured]], *,
                     alpha: float = 1.1, budget: int = 200, time_budget: float = 60.0,
                     keep: int = 3) -> PrecisionResult:
    """``strategy`` ``"greedy"`` or ``"relaxed"`` on ``table``, its proposals measured."""
    started = time.perf_counter()
    greedy = greedy_fallback(table, max_error, keep)
    if strategy == "greedy":
        stats = SearchStats(expansions=len(table.layers), stopped_by="budget holds")
        proposals = greedy
    elif strategy == "relaxed":
        proposals, stats = relaxed_precision_search(
            table, max_error, alpha=alpha, budget=budget, time_budget=time_budget, keep=keep,
            incumbent=greedy[0] if greedy else None)
    else:
        raise ValueError(f"unknown precision search strategy '{strategy}'")
    stats.wall_seconds = time.perf_counter() - started
    return measure_proposals(strategy, proposals, max_error, measure, stats,
                             stats.wall_seconds, first_inside=strategy == "greedy")
