"""A substitution rule is data: where it applies (a match), and the equivalent graph it makes.

In TASO's terms a rule has a source pattern, a target pattern and a mapping of outputs; here the
pattern is found by ``matches`` (which also checks the rule's preconditions) and the target is
built by ``apply``. The search treats every rule alike: it asks each for its matches in a graph,
applies one, and costs the result. A rule may make a graph *slower* on its own (enlarging a 1x1
kernel to 3x3); that is the point of a relaxed search, which keeps such graphs when they stay
within ``alpha`` of the best cost, because they enable later wins.

Contract for every rule:
- ``matches`` returns every place the rule applies, in a deterministic order, each a
  :class:`Match` naming the nodes it binds; a near-miss is simply not returned.
- ``apply`` returns a NEW GraphDef (the input is never modified) that computes the same values
  for every node outside the match; nodes in ``context.boundary`` keep their names, and any node
  a consumer outside the match reads keeps its name (or its consumers are rewired).
- New node names are deterministic (derived from the matched names), so that the same sequence
  of substitutions always gives the same graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tfopt.optimizer.transforms.base import TransformContext


@dataclass(frozen=True)
class Match:
    """One place a rule applies: the nodes it binds, and what ``apply`` needs to know."""

    rule: str
    nodes: tuple[str, ...]
    detail: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def describe(self) -> str:
        shown = ", ".join(self.nodes[:4]) + (" ..." if len(self.nodes) > 4 else "")
        return f"{self.rule}({shown})"


class Substitution:
    """Subclasses set ``name`` and ``description`` and implement ``matches`` and ``apply``.

    ``commutes``: the rule's rewrites at disjoint matches are independent of each other and
    each makes the graph cheaper on its own (folding, fusing, dropping no-ops). The search then
    also offers the graph with all of them applied as one child: otherwise reaching it takes one
    expansion per match (53 batch norms, 49 conv fusions in ResNet50), each costing every other
    match as a child, and a budgeted search never gets to the rewrites with trade-offs.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    commutes: ClassVar[bool] = False

    def matches(self, graph_def, context: TransformContext) -> list[Match]:
        raise NotImplementedError

    def apply(self, graph_def, match: Match, context: TransformContext):
        raise NotImplementedError

    def growth(self, graph_def, context: TransformContext) -> int:
        """How many nodes this rule's rewrites of ``graph_def`` may add in all, when that is
        more than a pattern's few (unrolling a loop adds a copy of its body per trip); the
        search raises its cap on a candidate's node count by it."""
        return 0
