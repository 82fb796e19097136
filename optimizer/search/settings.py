"""How the substitution search searches, in one place: :class:`SearchSettings` owns each
setting's default, bound and meaning. The search flow (:func:`tfopt.optimizer.optimize.flow.optimize`),
the pipeline config (``optimize.alpha``, ``optimize.budget``, ``optimize.time_budget_seconds``,
``optimize.cost``) and ``tfopt optimize``'s flags all read them from here.

Light to import: the CLI reads these defaults while it builds its parser.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tfopt.optimizer.records import Settings, default_of
from tfopt.optimizer.transforms.base import TransformConfigError

SEARCH_STRATEGIES = ("greedy", "relaxed")
SEARCH_COSTS = ("model", "measured")


class SearchSettings(Settings):
    """How :func:`tfopt.optimizer.optimize.flow.search_candidate` searches; a bad value is exit 2."""

    error = TransformConfigError
    subject = "search"

    strategy: Literal["greedy", "relaxed"] = Field(
        "relaxed", description="greedy: keep only cheaper graphs (alpha = 1); relaxed: also "
                               "keep graphs up to alpha x the best cost")
    # Relaxation: keep graphs up to 5 % costlier than the best found, enough to take the one
    # costlier step (a 1x1 convolution enlarged to 3x3) that a later merge pays back.
    alpha: float = Field(1.05, ge=1.0, description="relaxed search keeps graphs up to alpha x "
                                                   "the best cost (greedy: 1)")
    # Expansions: a ResNet50-sized graph settles well within 500 under the op cost model.
    budget: int = Field(500, ge=1, description="search: most graphs expanded")
    time_budget: float = Field(600.0, gt=0, title="time budget",
                               description="search: wall-time limit, in seconds")
    cost: Literal["model", "measured"] = Field(
        "model", description="search cost: cached per-op model, or end-to-end timing")
    remeasure_top: int = Field(3, ge=0, description="candidates re-measured end to end with "
                                                    "the input; 0: none")

    @model_validator(mode="after")
    def _greedy_is_alpha_1(self) -> SearchSettings:
        if self.strategy == "greedy":
            self.__dict__["alpha"] = 1.0  # greedy is the alpha = 1 baseline
        return self

    def describe(self) -> str:
        if self.strategy == "greedy":
            return f"greedy(cost={self.cost})"
        return f"relaxed(alpha={self.alpha:g}, cost={self.cost})"


DEFAULT_ALPHA = default_of(SearchSettings, "alpha")
DEFAULT_BUDGET = default_of(SearchSettings, "budget")
DEFAULT_TIME_BUDGET_SECONDS = default_of(SearchSettings, "time_budget")
