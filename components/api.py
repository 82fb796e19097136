"""tfopt from Python: :func:`optimize` does what ``tfopt optimize`` does, :func:`run` what
``tfopt run`` does, and both return what they did as a typed value instead of printing it.

```python
import tfopt

outcome = tfopt.optimize("model/", "fast/", targets=["savedmodel", "litert"],
                         eval_data="holdout.npz")
if outcome.passed:
    print(outcome.chosen.label, f"{outcome.speedup:.2f}x", outcome.written)

pipeline = tfopt.run("pipeline.yaml", overrides={"gate.min_speedup": 1.1})
print(pipeline.gate.summary)
```

Bad input raises the library's typed errors (:mod:`tfopt.optimizer.errors`, each carrying the exit
code the CLI would give: ``err.exit_code``); nothing here calls ``sys.exit``. A gate that
promotes nothing is not an error: the outcome says so (``outcome.passed`` False,
``outcome.exit_code`` 3).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.optimize.with_targets import OptimizeOutcome

if TYPE_CHECKING:
    from tfopt.components.config.pipeline_config import PipelineConfig
    from tfopt.components.pipeline.run import PipelineOutcome
    from tfopt.optimizer.optimize.recipe import Recipe
    from tfopt.optimizer.search.settings import SearchSettings
    from tfopt.optimizer.verify.tolerance import Tolerance

__all__ = ["OptimizeOutcome", "optimize", "run"]


def optimize(
    source: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    targets: str | Iterable[str] | None = None,
    eval_data: str | os.PathLike | None = None,
    calibration_data: str | os.PathLike | None = None,
    accuracy_budget: float | None = None,
    min_speedup: float | None = None,
    seconds: float | None = None,
    precision_search: str | None = None,
    tune: bool = False,
    recipe: str | Recipe | None = None,
    search: SearchSettings | None = None,
    tolerance: Tolerance | None = None,
    signature: str = DEFAULT_SIGNATURE,
    overwrite: bool = False,
    allow_ops: Iterable[str] = (),
    memory_gb: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> OptimizeOutcome:
    """Optimize the SavedModel at ``source`` and write the result at ``dst``.

    Without ``targets``: the recipe's optimized SavedModel, written only if its outputs agree
    with the source's within ``tolerance`` (``tfopt optimize SRC DST``). With ``targets``
    (``"savedmodel,litert"`` or ``["onnx", "openvino"]``): those candidates are built,
    benchmarked against the source and evaluated, and the fastest inside the accuracy budget
    is written at ``dst`` with ``candidates.json`` (``tfopt optimize SRC DST --targets ...``).

    - ``recipe``: a named recipe (``"inference"``, the default; ``"eight_bit"`` ...), a
      transform list in Graph Transform Tool syntax, or an
      :class:`~tfopt.optimizer.optimize.recipe.Recipe`; ``search``: a substitution search instead;
    - ``eval_data``: labelled data (an ``.npz`` of ``x`` and ``y``) for held-out accuracy
      (without it, accuracy is agreement with the source's top-1); ``calibration_data``:
      inputs that calibrate int8 candidates;
    - ``accuracy_budget``, ``min_speedup``, ``seconds``, ``precision_search``: None takes the
      library's default (the same as the CLI's and the pipeline config's);
    - ``tune``: measure the chosen model's best thread settings (``runtime_settings.json``);
    - ``allow_ops``: ops a model may hold beyond the default scan policy's;
    - ``progress(message)``: each stage's start and end, and the benchmark's rounds.

    Returns an :class:`~tfopt.optimizer.optimize.with_targets.OptimizeOutcome`: the chosen candidate,
    the table (``rows``), the precision searches, where it was written, the runtime settings,
    and ``exit_code`` (0, or 3 when no candidate passed and nothing was written).
    """
    from tfopt.optimizer.candidates.build import parse_targets
    from tfopt.optimizer.model.op_scan import ScanPolicy
    from tfopt.optimizer.optimize.with_targets import optimize_with_targets

    if targets is not None:
        targets = parse_targets(targets if isinstance(targets, str) else ",".join(targets))
    return optimize_with_targets(
        source, dst, recipe=_recipe(recipe), search=search, tolerance=tolerance,
        signature=signature, overwrite=overwrite, targets=targets, eval_data=eval_data,
        calibration_data=calibration_data, accuracy_budget=accuracy_budget,
        min_speedup=min_speedup, seconds=seconds, precision_search=precision_search,
        tune=tune, memory_gb=memory_gb, policy=ScanPolicy.create(list(allow_ops)),
        around=_announcing(progress) if progress is not None else None, progress=progress)


def run(
    config: str | os.PathLike | Mapping[str, Any] | PipelineConfig | None = None,
    *,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    run_id: str | None = None,
    publish: bool = True,
    progress: Callable[[str], None] | None = None,
) -> PipelineOutcome:
    """Run the whole pipeline (pull, freeze, optimize, benchmark, evaluate, gate, publish) in
    this process, as ``tfopt run`` does, and return its
    :class:`~tfopt.components.pipeline.run.PipelineOutcome`.

    ``config``: a pipeline YAML file's path, a mapping of the same keys, or a
    :class:`~tfopt.components.config.pipeline_config.PipelineConfig`; None: every key's default (then ``overrides``
    must at least give ``source``). ``overrides``: ``{"gate.min_speedup": 1.1}`` or
    ``["gate.min_speedup=1.1"]``, applied on top, as ``--set``. ``run_id`` is recorded on the
    MLflow run and version. ``publish=False`` asks no registry: the candidates are judged
    against the input and nothing is published. ``progress(message)``: each step's start and
    end.

    The gate's decision is ``outcome.gate.promote``; a rejection is not an error.
    """
    from tfopt.components.config.pipeline_config import (
        PipelineConfig,
        config_from_mapping,
        load_config,
    )
    from tfopt.components.pipeline.run import run_pipeline

    if isinstance(overrides, Mapping):
        overrides = dict(overrides)
    elif overrides is not None:
        overrides = list(overrides)
    if isinstance(config, PipelineConfig):
        if overrides:
            config = config_from_mapping(config.model_dump(mode="json"), "config", overrides)
    elif isinstance(config, Mapping):
        config = config_from_mapping(dict(config), "config", overrides)
    else:
        config = load_config(config, overrides)
    return run_pipeline(config, {"dag_run_id": run_id} if run_id else {},
                        publish_results=publish,
                        around_step=_announcing(progress) if progress is not None else None)


def _recipe(recipe: str | Recipe | None) -> Recipe | None:
    """A named recipe, or transforms in GTT syntax, as a :class:`Recipe`."""
    from tfopt.optimizer.optimize.recipe import RECIPES, Recipe

    if recipe is None or isinstance(recipe, Recipe):
        return recipe
    name = recipe.strip()
    return Recipe.named(name) if name in RECIPES else Recipe.from_string(recipe)


def _announcing(progress: Callable[[str], None]):
    """``around(stage)`` that tells ``progress`` when a stage starts and how long it took."""
    import time
    from contextlib import contextmanager

    @contextmanager
    def around(stage: str):
        started = time.perf_counter()
        progress(f"{stage} ...")
        yield
        progress(f"{stage} {time.perf_counter() - started:.1f} s")

    return around
