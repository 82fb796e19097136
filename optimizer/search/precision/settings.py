"""How the precision search searches, in one place: :class:`PrecisionSearchSettings` owns each
setting's default, bound and meaning; the pipeline config (``candidates.precision_search``) and
``tfopt optimize --precision-search`` read them from here. Light to import (the CLI's parser
reads the defaults)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.records import Settings

PRECISION_SEARCH_MODES = ("auto", "off", "greedy", "relaxed")


class PrecisionSearchSettings(Settings):
    """Which mixed-precision search runs, and within what; a bad value is exit 2."""

    error = InvalidInputsError
    subject = "precision search"

    mode: Literal["auto", "off", "greedy", "relaxed"] = Field(
        "auto", description="mixed int8/float candidates: off; greedy (fall back the most "
                            "sensitive layer until the budget holds); relaxed (search by "
                            "latency, alpha); auto: relaxed when uniform int8 breaks the "
                            "accuracy budget and labelled or calibration data exist, else off")
    # Keep assignments predicted up to 10 % slower than the best inside the budget: enough to
    # pass through one float layer (or one extra boundary) that a later move pays back.
    alpha: float = Field(1.1, ge=1.0, description="relaxed: keep assignments predicted up to "
                                                  "alpha x the best latency inside the budget")
    budget: int = Field(200, ge=1, description="relaxed: most assignments expanded")
    time_budget: float = Field(120.0, gt=0, title="time budget",
                               description="relaxed: wall-time limit of the queue, seconds")
    measure_top: int = Field(3, ge=1, description="assignments built and measured end to end")
