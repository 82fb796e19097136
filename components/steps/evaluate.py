"""evaluate: accuracy of every model measured, on labelled data when there is some.

With ``evaluation.data`` (an ``.npz`` with ``x``/``y`` or a TFRecord file, local or ``s3://``)
each model gets the configured metric in its own runtime (a LiteRT champion in LiteRT), and each
model's fidelity to the unoptimized input is measured on those real inputs. Without labels, the
benchmark's fidelity on generated inputs stands, and the gate bounds the accuracy drop through
top-1 agreement with the input.
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

    from tfopt.optimizer.verify.evaluation import load_labelled_data

    with tempfile.TemporaryDirectory(prefix="tfopt-eval-check-") as scratch:
        return load_labelled_data(
            local_data_file(config.evaluation.data, config, Path(scratch)), signature,
            config.evaluation.metric)


def from_inputs(call) -> EvaluationOutput:
    """The table's entry (tfopt.components.pipeline.step_table)."""
    measured = call.output("benchmark")
    evaluation = evaluate(call.config, measured, call.workspace)
    # A record an older tfopt left in the workspace carries no candidates: the benchmark's.
    return evaluation if evaluation.candidates else dataclasses.replace(
        evaluation, candidates=measured.candidates)


def evaluate(config: PipelineConfig, benchmark: BenchmarkOutput, ws: Workspace
             ) -> EvaluationOutput:
    def run(step_dir: Path) -> EvaluationOutput:
        from tfopt.optimizer.benchmark.result import Fidelity, Quality, load_result
        from tfopt.optimizer.runtime import load_runner
        from tfopt.optimizer.verify.equivalence import compare
        from tfopt.optimizer.verify.evaluation import (
            EVAL_BATCH_SIZE,
            get_metric,
            load_labelled_data,
        )
        from tfopt.optimizer.verify.evaluation import evaluate as evaluate_metric

        result = load_result(benchmark.result_path)
        if not config.evaluation.data:
            log.info("evaluate: no labelled data; the gate uses fidelity to the input")
            path = result.save(step_dir / "evaluation.json")
            return EvaluationOutput(result_path=str(path), has_labels=False,
                                    metric=config.evaluation.metric, scores={},
                                    candidate_tags=benchmark.candidate_tags,
                                    candidates=benchmark.candidates)

        metric = get_metric(config.evaluation.metric)
        policy = config.security.scan_policy()
        runners = {m.label: load_runner(m.path, config.signature, format=m.format,
                                        num_threads=m.num_threads, policy=policy)
                   for m in result.measured}
        reference = result.accuracy_reference
        data = load_labelled_data(local_data_file(config.evaluation.data, config, step_dir),
                                  runners[reference.label].signature, metric.name)
        key = runners[reference.label].signature.inputs[0].key
        feeds = [{key: data.x[i:i + EVAL_BATCH_SIZE]}
                 for i in range(0, len(data), EVAL_BATCH_SIZE)]
        scores, updated = {}, {}
        for model in result.measured:
            log.info("evaluate: %s (%s) on %d examples of %s", model.label, model.runtime,
                     len(data), data.source)
            value = evaluate_metric(runners[model.label], data, metric.name, EVAL_BATCH_SIZE)
            scores[model.label] = value
            quality = Quality(metric.name, value, metric.higher_is_better, len(data), data.source)
            fidelity = model.fidelity
            if model is not reference:
                report = compare(runners[reference.label], runners[model.label], feeds)
                fidelity = Fidelity.of(report, "eval data")
            updated[model.label] = dataclasses.replace(model, quality=quality, fidelity=fidelity)
        result = dataclasses.replace(
            result, baseline=updated[result.baseline.label],
            candidates=tuple(updated[c.label] for c in result.candidates),
            reference=updated[result.reference.label] if result.reference else None)
        path = result.save(step_dir / "evaluation.json")
        return EvaluationOutput(result_path=str(path), has_labels=True, metric=metric.name,
                                scores=scores, candidate_tags=benchmark.candidate_tags,
                                candidates=benchmark.candidates)

    return ws.reuse_or_run(Workspace.keyed("evaluate", benchmark.result_path),
                           EvaluationOutput, run)
