"""evaluate: accuracy of every model measured, on labelled data when there is some.

With ``evaluation.data`` (an ``.npz`` with ``x``/``y`` or a TFRecord file, local or ``s3://``)
each model gets the configured metric in its own runtime (a LiteRT champion in LiteRT), and each
model's fidelity to the unoptimized input is measured on those real inputs: the library's
evaluate stage (:func:`tfopt.optimizer.benchmark.accuracy.evaluate_models`), which
``tfopt optimize --targets`` runs too. Without labels, the benchmark's fidelity on generated
inputs stands, and the gate bounds the accuracy drop through top-1 agreement with the input.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import BenchmarkOutput, EvaluationOutput
from tfopt.components.pipeline.workspace import Workspace

log = logging.getLogger(__name__)


def local_data_file(location: str, config: PipelineConfig, step_dir: Path) -> Path:
    """``location`` (evaluation or calibration data) as a local file: an ``s3://`` object is
    downloaded into ``step_dir``. An ``.npz`` whose headers declare more than the memory
    budget is refused here, exit 7, before any array is read."""
    import zipfile

    from tfopt.optimizer.inputs.data_files import require_npz_fits
    from tfopt.optimizer.system.memory_budget import memory_budget

    path = Path(location)
    if location.startswith("s3://"):
        from tfopt.components.storage.s3 import download_file

        path = download_file(location, step_dir / Path(location).name, config.s3)
    if zipfile.is_zipfile(path):
        require_npz_fits(path, memory_budget(config.resources.memory_gb))
    return path


def check_evaluation_data(config: PipelineConfig, signature):
    """Refuse now evaluation data that does not fit the model (``signature``: ``x`` of other
    dtypes or shapes, no rows) or labels ``evaluation.metric`` cannot score against its output,
    in the first step that reads it, not once every candidate has been built and timed.
    Returns the data (a :class:`~tfopt.optimizer.verify.evaluation.LabelledData`), None without any.
    An ``s3://`` file is fetched into a directory of its own and let go."""
    if not config.evaluation.data:
        return None
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tfopt-eval-check-") as scratch:
        return labelled_data(config, signature, Path(scratch))


def from_inputs(call) -> EvaluationOutput:
    """The table's entry (tfopt.components.pipeline.step_table)."""
    measured = call.output("benchmark")
    evaluation = evaluate(call.config, measured, call.workspace)
    # A record an older tfopt left in the workspace carries no candidates: the benchmark's.
    return evaluation if evaluation.candidates else dataclasses.replace(
        evaluation, candidates=measured.candidates)


def labelled_data(config: PipelineConfig, signature, step_dir: Path):
    """``evaluation.data`` read for a model of ``signature`` (a
    :class:`~tfopt.optimizer.verify.evaluation.LabelledData`, refused in one line when it does not fit
    it or ``evaluation.metric``), an ``s3://`` file fetched into ``step_dir``; None without any."""
    if not config.evaluation.data:
        return None
    from tfopt.optimizer.verify.evaluation import load_labelled_data

    return load_labelled_data(local_data_file(config.evaluation.data, config, step_dir),
                              signature, config.evaluation.metric)


def evaluate(config: PipelineConfig, benchmark: BenchmarkOutput, ws: Workspace
             ) -> EvaluationOutput:
    def run(step_dir: Path) -> EvaluationOutput:
        from tfopt.optimizer.benchmark.accuracy import evaluate_models
        from tfopt.optimizer.benchmark.result import load_result
        from tfopt.optimizer.runtime import read_signature

        result = load_result(benchmark.result_path)
        if not config.evaluation.data:
            log.info("evaluate: no labelled data; the gate uses fidelity to the input")
            path = result.save(step_dir / "evaluation.json")
            return EvaluationOutput(result_path=str(path), has_labels=False,
                                    metric=config.evaluation.metric, scores={},
                                    candidate_tags=benchmark.candidate_tags,
                                    candidates=benchmark.candidates)

        policy = config.security.scan_policy()
        reference = result.accuracy_reference
        data = labelled_data(config, read_signature(reference.path, config.signature,
                                                    format=reference.format, policy=policy),
                             step_dir)
        result = evaluate_models(result, data, config.evaluation.metric,
                                 signature=config.signature, policy=policy,
                                 progress=lambda message: log.info("evaluate: %s", message))
        path = result.save(step_dir / "evaluation.json")
        return EvaluationOutput(result_path=str(path), has_labels=True,
                                metric=config.evaluation.metric,
                                scores={m.label: m.quality.value for m in result.measured},
                                candidate_tags=benchmark.candidate_tags,
                                candidates=benchmark.candidates)

    return ws.reuse_or_run(Workspace.keyed("evaluate", benchmark.result_path),
                           EvaluationOutput, run)
