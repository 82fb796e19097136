"""``tfopt optimize SRC DST``, with or without ``--targets``, as one function that returns what
it did: :func:`optimize_with_targets`. The CLI parses its flags, calls it and prints the
:class:`OptimizeOutcome`; the Python API (``tfopt.components.api.optimize``) calls it too.

Without targets, the recipe's (or search's) optimized SavedModel is written at DST once its
outputs agree with SRC's. With targets, the optimized float32 SavedModel and the candidates the
targets allow (:mod:`tfopt.optimizer.optimize.candidates_stage`) are benchmarked against SRC in one
process and evaluated (held-out accuracy with eval data, agreement with SRC's top-1 without);
the gate chooses the fastest that is faster with confidence and inside the accuracy budget
(:func:`tfopt.optimizer.gate.selection.select_candidate`). DST is a directory, written atomically:

- the chosen SavedModel itself, or the chosen model's file(s) with its JSON sidecar
  (``model.tflite``, ``model.onnx``, or ``model.xml`` and ``model.bin``; plus ``<file>.json``);
- ``candidates.json``: every candidate with its format, latency, accuracy and verdict;
- ``runtime_settings.json`` with ``tune``: the thread settings measured best for it;
- ``precision_search.json`` when a precision search ran: its table, the assignments it built
  and measured and the float layers of each mixed int8 candidate, by label.

When no candidate passes, nothing is written at DST; ``DST.candidates.json`` beside it says why,
and the outcome's ``exit_code`` is 3, as for ``tfopt gate``.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE

if TYPE_CHECKING:
    from tfopt.optimizer.candidates.candidate import Candidate
    from tfopt.optimizer.gate.selection import Selection
    from tfopt.optimizer.optimize.flow import OptimizeResult
    from tfopt.optimizer.optimize.recipe import Recipe
    from tfopt.optimizer.search.precision.candidates import PrecisionOutcome
    from tfopt.optimizer.search.settings import SearchSettings
    from tfopt.optimizer.verify.tolerance import Tolerance

log = logging.getLogger(__name__)

PRECISION_SEARCH_FILE = "precision_search.json"
OPTIMIZE_STAGE = "optimize"  # what ``around`` is entered with, besides the candidates stage's
TENSORFLOW_STAGE = "loading TensorFlow"
MEASURE_STAGE = "benchmark+evaluate"
TUNE_STAGE = "tune"


@dataclass
class OptimizeOutcome:
    """What :func:`optimize_with_targets` did.

    - ``result``: the optimized graph, its trace and its equivalence with the source;
    - ``written``: DST as written (None when nothing was: no candidate passed);
    - ``exit_code``: 0, or 3 when no candidate passed the gate (``tfopt gate``'s);
    - with targets: ``selection`` (every candidate measured and the gate's decision),
      ``chosen`` (None when none passed), ``rows`` (the table, one dict per candidate),
      ``speedup`` and ``load_with`` of the chosen one, ``candidates_file``, ``precision`` (each
      precision search's outcome by label), ``runtime_settings`` (with ``tune``),
      ``accuracy_kind``, ``input_accuracy`` and ``accuracy_budget`` (what the candidates were
      held to);
    - ``costs``: each stage's :class:`~tfopt.optimizer.system.process_tree.Cost`.
    """

    result: OptimizeResult
    saved_model_bytes_before: int
    written: Path | None = None
    saved_model_bytes_after: int | None = None
    exit_code: int = 0
    selection: Selection | None = None
    precision: dict[str, PrecisionOutcome] = field(default_factory=dict)
    runtime_settings: Any = None  # tfopt.optimizer.runtime_tuning.record.RuntimeSettings
    candidates_file: Path | None = None
    accuracy_kind: str | None = None
    input_accuracy: float | None = None
    accuracy_budget: float | None = None
    costs: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def chosen(self) -> Candidate | None:
        return self.selection.chosen if self.selection is not None else None

    @property
    def rows(self) -> list[dict]:
        return self.selection.rows() if self.selection is not None else []

    @property
    def speedup(self) -> float | None:
        chosen = self.chosen
        return self.selection.decision.verdict(chosen.label).speedup if chosen else None

    @property
    def load_with(self) -> str | None:
        chosen = self.chosen
        return chosen.how_to_load.strip().splitlines()[-1] if chosen else None

    def to_dict(self) -> dict:
        """What ``tfopt optimize --json`` prints (its ``costs`` are the CLI's, the whole
        command's included)."""
        document = {**self.result.to_dict(),
                    "saved_model_bytes_before": self.saved_model_bytes_before,
                    "saved_model_bytes_after": self.saved_model_bytes_after,
                    "written": None if self.written is None else str(self.written)}
        if self.selection is None:
            return document
        if self.precision:
            document["precision_search"] = {label: outcome.to_dict()
                                            for label, outcome in self.precision.items()}
        chosen = self.chosen
        kept = {chosen.label: str(self._chosen_path())} if chosen else {}
        document.update(accuracy_kind=self.accuracy_kind, input_accuracy=self.input_accuracy,
                        accuracy_budget=self.accuracy_budget,
                        runtime_settings=(self.runtime_settings.to_dict()
                                          if self.runtime_settings is not None else None),
                        **self.selection.to_dict(kept=kept),
                        candidates_file=str(self.candidates_file))
        if chosen is not None:
            document.update(speedup=self.speedup, load_with=self.load_with)
        return document

    def _chosen_path(self) -> Path:
        chosen = self.chosen
        is_file = chosen.artifact_dir != Path(chosen.path)
        return self.written / Path(chosen.path).name if is_file else self.written


def _input_and_budget(rows: list[dict]) -> tuple[str | None, float | None]:
    """The accuracy the candidates are held to: SRC's on the eval data (or 1, the agreement of
    SRC with itself), and what kind it is."""
    measured = next((r for r in rows if r.get("accuracy_kind")), None)
    return ((measured["accuracy_kind"], measured["baseline_accuracy"]) if measured
            else (None, None))


def optimize_with_targets(
    source: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    recipe: Recipe | None = None,
    search: SearchSettings | None = None,
    tolerance: Tolerance | None = None,
    backend: str | None = None,
    signature: str = DEFAULT_SIGNATURE,
    overwrite: bool = False,
    targets: tuple[str, ...] | None = None,
    eval_data: str | os.PathLike | None = None,
    calibration_data: str | os.PathLike | None = None,
    accuracy_budget: float | None = None,
    min_speedup: float | None = None,
    seconds: float | None = None,
    precision_search: str | None = None,
    tune: bool = False,
    memory_gb: float | None = None,
    policy: ScanPolicy = DEFAULT_POLICY,
    around: Callable[[str], AbstractContextManager] | None = None,
    on_optimized: Callable[[OptimizeResult], None] | None = None,
    on_precision: Callable[[str, PrecisionOutcome], None] | None = None,
    progress: Callable[[str], None] | None = None,
    costs: dict | None = None,
) -> OptimizeOutcome:
    """Optimize the SavedModel at ``source`` and write the result at ``dst``.

    ``recipe`` (default: the inference recipe) or ``search`` makes the optimized graph, held to
    ``tolerance`` (default: the recipe's, else :class:`~tfopt.optimizer.verify.tolerance.Tolerance`'s).
    ``targets`` (``savedmodel``, ``litert``, ``onnx``, ``openvino``): build those candidates and
    write the one the gate chooses (see the module's docstring); ``eval_data`` (an ``.npz`` of
    ``x`` and ``y``), ``calibration_data``, ``accuracy_budget`` and ``min_speedup`` (default:
    :class:`~tfopt.optimizer.gate.verdict.GateConfig`'s), ``seconds`` (benchmark, default
    :class:`~tfopt.optimizer.benchmark.settings.BenchmarkConfig`'s), ``precision_search`` (default
    :class:`~tfopt.optimizer.search.precision.settings.PrecisionSearchSettings`'s) and ``tune``
    apply to them. ``memory_gb``: the budget where no cgroup limit applies.

    Hooks for a caller that shows progress: ``around(stage)`` is entered around each stage
    (``loading TensorFlow``, ``optimize``, ``candidates``, ``precision search``,
    ``benchmark+evaluate``, ``tune``); ``on_optimized(result)`` sees the optimized graph's
    result before it is judged; ``on_precision(label, outcome)`` each precision search's;
    ``progress(message)`` the benchmark's rounds; ``costs`` (a dict) gets each stage's cost as
    it ends, so a caller has them even when a later stage raises.

    Raises the library's typed errors (:mod:`tfopt.optimizer.errors`): bad targets, data or
    settings before any work; :class:`~tfopt.optimizer.errors.EquivalenceError` when the optimized
    outputs differ from the source's; :class:`~tfopt.optimizer.errors.DestinationError` when ``dst``
    exists without ``overwrite``.
    """
    from tfopt.optimizer.files.atomic import check_writable
    from tfopt.optimizer.model.footprint import builds_in_workers
    from tfopt.optimizer.model.savedmodel import directory_size
    from tfopt.optimizer.optimize.flow import optimize, write_optimized
    from tfopt.optimizer.optimize.recipe import Recipe
    from tfopt.optimizer.system.free_memory import return_freed_memory
    from tfopt.optimizer.verify.tolerance import Tolerance

    costs = {} if costs is None else costs
    metered = _metering(around or (lambda stage: nullcontext()), costs)
    checked = _check_targets(source, signature, targets, eval_data, calibration_data, policy,
                             accuracy_budget, min_speedup, seconds, precision_search)
    if search is None and recipe is None:
        recipe = Recipe.default(backend)
    tolerance = tolerance or (recipe.tolerance if recipe is not None else None) or Tolerance()
    dst = check_writable(dst, overwrite)  # absolute: what is written is said so
    budget = _check_memory(source, memory_gb, with_candidates=targets is not None)
    in_worker = builds_in_workers(source)
    if not in_worker and "tensorflow" not in sys.modules:
        from tfopt.optimizer.tf_runtime import import_tensorflow

        with (around or (lambda stage: nullcontext()))(TENSORFLOW_STAGE):
            import_tensorflow()
    runtime = None
    if targets is not None and not in_worker:
        from tfopt.optimizer.system.cpu_threads import (
            apply_runtime_settings,
            default_runtime_settings,
        )

        runtime = apply_runtime_settings(default_runtime_settings())  # before TF sizes pools
        # a model optimized in workers is not loaded here (its outputs on generated inputs
        # are checked in the optimize flow, as every model's are)
        if checked.eval_data is not None:
            from tfopt.optimizer.verify.evaluation import refuse_nonfinite_input_model

            refuse_nonfinite_input_model(source, checked.eval_data, signature, policy)
    with metered(OPTIMIZE_STAGE):
        result = optimize(source, recipe, signature_name=signature, tolerance=tolerance,
                          backend=backend, search=search, in_worker=in_worker, policy=policy)
    return_freed_memory()  # the copies freezing and transforming held: the next stages need it
    if on_optimized is not None:
        on_optimized(result)
    if not result.accepted:
        from tfopt.optimizer.errors import EquivalenceError

        raise EquivalenceError(result.divergence())
    outcome = OptimizeOutcome(result=result, costs=costs,
                              saved_model_bytes_before=directory_size(source))
    if targets is None:
        outcome.written = write_optimized(result, dst, overwrite=overwrite)
        outcome.saved_model_bytes_after = directory_size(outcome.written)
        return outcome
    return _with_candidates(outcome, source, dst, checked, signature=signature,
                            overwrite=overwrite, tune=tune, budget=budget, runtime=runtime,
                            policy=policy, metered=metered, on_precision=on_precision,
                            progress=progress)


@dataclass(frozen=True)
class _Checked:
    """The targets' settings, checked before any work."""

    settings: Any  # CandidateSettings
    gate: Any  # GateConfig
    benchmark: Any  # BenchmarkConfig
    precision: Any  # PrecisionSearchSettings
    eval_data: Any  # LabelledData | None
    eval_data_file: str | os.PathLike | None
    calibration_data: str | os.PathLike | None


def _check_targets(source, signature, targets, eval_data, calibration_data, policy,
                   accuracy_budget, min_speedup, seconds, precision_search) -> _Checked | None:
    """A bad target, an unreadable calibration file, or labels the gate's metric cannot score
    against the model's output, is an error before any work; the eval data is read once."""
    if targets is None:
        return None
    from tfopt.optimizer.benchmark.settings import BenchmarkConfig
    from tfopt.optimizer.candidates.build import CandidateSettings
    from tfopt.optimizer.gate.verdict import GateConfig
    from tfopt.optimizer.inputs.calibration import read_inputs
    from tfopt.optimizer.model.savedmodel import get_signature
    from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings
    from tfopt.optimizer.verify.evaluation import load_labelled_data

    settings = CandidateSettings(targets=tuple(targets))
    given = {k: v for k, v in (("max_accuracy_drop_abs", accuracy_budget),
                               ("min_speedup", min_speedup)) if v is not None}
    gate = GateConfig(**given)
    # timing settles around the gate's own bound and confidence, as the pipeline's benchmark does
    benchmark = BenchmarkConfig(signature=signature, settle_speedup=gate.min_speedup,
                                confidence=gate.confidence,
                                **({"min_seconds": seconds} if seconds is not None else {}))
    precision = PrecisionSearchSettings(
        **({"mode": precision_search} if precision_search is not None else {}))
    labelled = None
    if calibration_data is not None or eval_data is not None:
        model_signature = get_signature(source, signature, policy=policy)
        if calibration_data is not None:
            read_inputs(calibration_data, model_signature)
        if eval_data is not None:
            labelled = load_labelled_data(eval_data, model_signature, benchmark.metric)
    return _Checked(settings=settings, gate=gate, benchmark=benchmark, precision=precision,
                    eval_data=labelled, eval_data_file=eval_data,
                    calibration_data=calibration_data)


def _check_memory(source, memory_gb: float | None, with_candidates: bool):
    """The budget; a model that could not even be optimized within it is refused now."""
    from tfopt.optimizer.model.footprint import disk_bytes, job_minimum_bytes, optimizing_bytes
    from tfopt.optimizer.system.memory_budget import GIB, memory_budget

    if memory_gb is not None and memory_gb <= 0:
        from tfopt.optimizer.errors import InvalidInputsError

        raise InvalidInputsError(f"--memory-gb must be positive, got {memory_gb:g}")
    budget = memory_budget(memory_gb)
    estimate = job_minimum_bytes(source) if with_candidates else optimizing_bytes(source)
    budget.require(estimate, f"optimizing {source} ({disk_bytes(source) / GIB:.2f} GiB "
                             f"on disk)" + (" and benchmarking its candidates"
                                            if with_candidates else ""))
    return budget


def _metering(around: Callable[[str], AbstractContextManager], costs: dict):
    """``metered(stage)``: ``around(stage)`` with the process tree's cost recorded in
    ``costs[stage]``."""
    from tfopt.optimizer.system.process_tree import TreeMeter

    @contextmanager
    def metered(stage: str) -> Iterator[None]:
        with around(stage), TreeMeter() as meter:
            yield
        costs[stage] = meter.cost

    return metered


def _with_candidates(outcome: OptimizeOutcome, source, dst: Path, checked: _Checked, *,
                     signature: str, overwrite: bool, tune: bool, budget, runtime, policy,
                     metered, on_precision, progress) -> OptimizeOutcome:
    from tfopt.optimizer.candidates.build import savedmodel_load_instructions
    from tfopt.optimizer.candidates.candidate import Candidate
    from tfopt.optimizer.files.atomic import atomic_directory
    from tfopt.optimizer.gate.selection import CANDIDATES_FILE, select_candidate
    from tfopt.optimizer.gate.verdict import EXIT_REJECT
    from tfopt.optimizer.optimize.candidates_stage import build_candidates
    from tfopt.optimizer.optimize.flow import write_optimized

    result = outcome.result
    dst.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f".{dst.name}.candidates-", dir=dst.parent))
    try:
        optimized_dir = write_optimized(result, workdir / "optimized")
        optimized = Candidate(label="optimized", target="savedmodel", variant="fp32",
                              format="savedmodel", runtime="tensorflow",
                              path=str(optimized_dir),
                              how_to_load=savedmodel_load_instructions(signature))
        built = build_candidates(
            source, result.candidate.model, workdir, checked.settings, signature=signature,
            precision=checked.precision, accuracy_budget=checked.gate.max_accuracy_drop_abs,
            calibration_data=checked.calibration_data, eval_data_file=checked.eval_data_file,
            eval_data=checked.eval_data, budget=budget, policy=policy, around=metered,
            on_precision=on_precision)
        if not built.precision:
            outcome.costs.pop("precision search", None)
        outcome.precision = built.precision
        candidates = ([optimized] if "savedmodel" in checked.settings.targets else []) \
            + built.candidates
        with metered(MEASURE_STAGE):
            selection = select_candidate(
                source, candidates, checked.gate, checked.benchmark, skipped=built.skipped,
                eval_data=checked.eval_data, runtime=runtime,
                progress=progress or (lambda message: log.info("benchmark: %s", message)),
                budget=budget, policy=policy)
        outcome.selection = selection
        outcome.accuracy_kind, outcome.input_accuracy = _input_and_budget(selection.rows())
        outcome.accuracy_budget = checked.gate.max_accuracy_drop_abs
        chosen = selection.chosen
        if chosen is None:
            outcome.exit_code = EXIT_REJECT
            outcome.candidates_file = selection.write_json(
                dst.parent / f"{dst.name}.{CANDIDATES_FILE}", kept={})
            if built.precision:
                _write_precision_search(built.precision,
                                        dst.parent / f"{dst.name}.{PRECISION_SEARCH_FILE}")
            return outcome
        outcome.written = dst
        is_file = chosen.artifact_dir != Path(chosen.path)
        with atomic_directory(dst, overwrite=overwrite) as staging:
            shutil.copytree(chosen.artifact_dir, staging)
            selection.write_json(staging / CANDIDATES_FILE,
                                 kept={chosen.label: str(outcome._chosen_path())})
            if built.precision:
                _write_precision_search(built.precision, staging / PRECISION_SEARCH_FILE)
            if tune:
                with metered(TUNE_STAGE):
                    outcome.runtime_settings = _tune(
                        staging, staging / Path(chosen.path).name if is_file else staging,
                        signature, policy, budget)
        outcome.candidates_file = dst / CANDIDATES_FILE
        return outcome
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _write_precision_search(outcomes: dict, path: Path) -> None:
    import json

    from tfopt.optimizer.files.atomic import atomic_file

    with atomic_file(path, overwrite=True) as staging:
        staging.write_text(json.dumps({label: outcome.to_dict()
                                       for label, outcome in outcomes.items()}, indent=2) + "\n")


def _tune(directory: Path, model_path: Path, signature: str, policy, budget):
    from tfopt.optimizer.runtime_tuning import RUNTIME_SETTINGS_FILE, tune_runtime

    settings = tune_runtime(model_path, signature=signature,
                            progress=lambda message: log.info("tuning: %s", message),
                            policy=policy, budget=budget)
    settings.to_json(directory / RUNTIME_SETTINGS_FILE)
    return settings
