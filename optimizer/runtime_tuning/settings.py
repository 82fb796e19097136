"""How long runtime tuning measures, in one place: :class:`TuningSettings` owns each setting's
default, bound and meaning. :func:`~tfopt.optimizer.runtime_tuning.tune.tune_runtime`, the pipeline
config's ``tuning`` section and ``tfopt optimize --tune`` all read them from here.

Light to import: the CLI and the config read these defaults while they build.
"""

from __future__ import annotations

from pydantic import Field

from tfopt.optimizer.records import Settings, default_of
from tfopt.optimizer.runtime_tuning.checks import RuntimeTuningError


class TuningSettings(Settings):
    """The thread search's rounds and the batch curve's time budget; a bad value is exit 2."""

    error = RuntimeTuningError
    subject = "tuning"

    # Six short rounds keep a tuning of the whole grid near ten seconds; a setting must then win
    # all six to pass the one-sided sign test at 5 % (p = 1/64), which noise rarely does.
    rounds: int = Field(6, ge=1, description="interleaved rounds of the thread search")
    seconds_per_probe: float = Field(0.3, gt=0, description="timed seconds per setting per "
                                                            "round")
    time_budget_seconds: float = Field(15.0, gt=0, description="bounds the batch-size curve")
    min_gain: float = Field(0.03, ge=0, lt=1, description="a thread setting replaces the "
                                                          "reference only if faster by this "
                                                          "share")


DEFAULT_ROUNDS = default_of(TuningSettings, "rounds")
DEFAULT_SECONDS_PER_PROBE = default_of(TuningSettings, "seconds_per_probe")
DEFAULT_TIME_BUDGET_SECONDS = default_of(TuningSettings, "time_budget_seconds")
DEFAULT_MIN_GAIN = default_of(TuningSettings, "min_gain")
