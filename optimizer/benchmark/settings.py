"""How the benchmark times and judges, in one place: :class:`BenchmarkConfig` owns each
setting's default, bound and meaning. The harness (:func:`tfopt.optimizer.benchmark.harness.run_benchmark`),
the pipeline config's ``benchmark`` section and ``tfopt benchmark``'s flags all read them from
here.

Light to import: the CLI reads these defaults while it builds its parser.
"""

from __future__ import annotations

from pydantic import Field, PositiveInt

from tfopt.optimizer.benchmark.interleaved import DEFAULT_BLOCK_SECONDS, DEFAULT_BLOCK_SIZE
from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.records import Settings


class BenchmarkConfig(Settings):
    """What :func:`~tfopt.optimizer.benchmark.harness.run_benchmark` measures and how long; a bad
    value is exit 2."""

    error = InvalidInputsError
    subject = "benchmark"

    batch_sizes: tuple[PositiveInt, ...] = Field((1,), min_length=1,
                                                 description="the gate judges the smallest")
    warmup: int = Field(10, ge=0, description="untimed calls per model first")
    min_runs: int = Field(50, ge=2, description="timed rounds at least (one block of each "
                                                "model)")
    min_seconds: float = Field(5.0, ge=0, description="timed seconds at least, per batch size")
    max_runs: int = Field(20_000, ge=1, description="timed rounds at most, per batch size")
    block_size: int = Field(DEFAULT_BLOCK_SIZE, ge=1, description="consecutive timed calls per "
                            "model per round, after one untimed call (1: one call, none "
                            "untimed)")
    # A block is there to time a model warm, and a call this slow wakes its model in a
    # negligible share of its time.
    block_seconds: float = Field(DEFAULT_BLOCK_SECONDS, ge=0, description="blocks shrink to as few calls as last "
                                 "this long (a slow call needs no block to be warm); 0: always "
                                 "block_size")
    # None: MAX_SECONDS_PER_MIN_SECOND x min_seconds (harness), so a quick configuration stays
    # quick.
    max_seconds: float | None = Field(None, ge=0, description="timing goes on past the minimums "
                                      "while a candidate's interval straddles the gate's bound "
                                      "or its near-tie choice is unresolved, up to this (per "
                                      "batch size); default 4 x min_seconds; 0: stop at the "
                                      "minimums")
    settle_speedup: float | None = Field(1.05, ge=1.0, description="the promotion bound (the "
                                         "gate's min_speedup) timing goes on around; None: stop "
                                         "at the minimums")
    twin: bool = Field(True, description="time a second load of the baseline like a candidate; "
                                         "the gate demands the margin beyond their discrepancy")
    confidence: float = Field(0.95, gt=0.5, lt=1,
                              description="level of the speedup's bootstrap interval")
    resamples: int = Field(2000, ge=1, description="bootstrap resamples per interval")
    metric: str = Field("top1", description="accuracy metric on labelled data "
                                            "(tfopt.optimizer.verify.evaluation.METRICS)")
    signature: str = Field(DEFAULT_SIGNATURE, description="the signature called")
    progress_every: float = Field(5.0, description="seconds between progress lines")
    seed: int = Field(0, description="of generated inputs and the bootstrap")
