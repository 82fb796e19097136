"""The tuning result as a record: ``runtime_settings.json`` next to the artifact, MLflow tags.

The JSON also says how to apply the settings when serving: environment variables
(``TF_NUM_INTRAOP_THREADS``, ``TF_NUM_INTEROP_THREADS``, ``OMP_NUM_THREADS``), the matching
``tensorflow_model_server`` flags, or a per-model runtime's thread count (a LiteRT interpreter's
``num_threads``, ONNX Runtime's ``intra_op_num_threads``, OpenVINO's ``INFERENCE_NUM_THREADS``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from tfopt.optimizer.records import record_error_line, record_from_dict, record_to_dict
from tfopt.optimizer.runtime_tuning.batch import BatchPoint
from tfopt.optimizer.runtime_tuning.checks import RuntimeTuningError
from tfopt.optimizer.runtime_tuning.grid import ThreadSetting, serving_env
from tfopt.optimizer.runtime_tuning.threads import ThreadProbe

RUNTIME_SETTINGS_FILE = "runtime_settings.json"
TAG_PREFIX = "tfopt.runtime."
_DEFAULT_THREADS = "len(os.sched_getaffinity(0))"  # the thread count in every load snippet


@dataclass(frozen=True)
class TunedRuntimeSettings:
    """What to serve ``model`` with, and the measurements behind it.

    Not :class:`tfopt.optimizer.system.cpu_threads.RuntimeSettings` (what one benchmark run asks of
    TensorFlow); :meth:`benchmark_settings` converts to it.
    """

    model: str
    intra_op_threads: int | None
    inter_op_threads: int | None
    num_threads: int | None
    recommended_batch_size: int | None
    batch_reason: str
    throughput_target: float | None
    latency_slo_ms: float | None
    reference: ThreadSetting
    thread_probes: tuple[ThreadProbe, ...]
    batch_curve: tuple[BatchPoint, ...]
    batches_not_measured: tuple[int, ...]
    available_cpus: int
    cpu_quota: float | None
    cpu_model: str
    method: str = ""
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    @property
    def threads(self) -> ThreadSetting:
        return ThreadSetting(self.intra_op_threads, self.inter_op_threads, self.num_threads)

    def serving(self) -> dict:
        """How to apply the settings when serving, for the JSON's readers."""
        if self.num_threads is not None:
            from tfopt.optimizer.runtime import detect_format, runtime_for

            runtime = runtime_for(detect_format(self.model))
            return {runtime.name: {runtime.thread_option: self.num_threads},
                    "note": f"pass {runtime.thread_option} to {runtime.name} when loading the "
                            f"model"}
        return {
            "env": serving_env(self.threads),
            "tensorflow_model_server_flags": [
                f"--tensorflow_intra_op_parallelism={self.intra_op_threads}",
                f"--tensorflow_inter_op_parallelism={self.inter_op_threads}"],
            "note": ("TensorFlow and TF Serving read TF_NUM_INTRAOP_THREADS and "
                     "TF_NUM_INTEROP_THREADS when no thread count is configured; "
                     "OMP_NUM_THREADS sizes OpenMP builds of oneDNN; in-process, "
                     "tf.config.threading.set_*_parallelism_threads before TensorFlow's "
                     "first op does the same")}

    def load_snippet(self, snippet: str) -> str:
        """``snippet`` (a model's load line, :attr:`Candidate.how_to_load`) with these thread
        settings in it: a per-model runtime's thread count in place of the CPUs the process
        may use (every format's snippet asks ``len(os.sched_getaffinity(0))``), TensorFlow's
        two pools set before the load, which is before TensorFlow's first op."""
        if self.num_threads is not None:
            return snippet.replace(_DEFAULT_THREADS, str(self.num_threads))
        if self.intra_op_threads is None:
            return snippet
        # one statement line before the snippet's first: a one-line snippet stays one line
        first, _, rest = snippet.partition("\n")
        return (f"tf.config.threading.set_intra_op_parallelism_threads({self.intra_op_threads}); "
                f"tf.config.threading.set_inter_op_parallelism_threads("
                f"{self.inter_op_threads}); {first}" + (f"\n{rest}" if rest else ""))

    def benchmark_settings(self):
        """These threads as :class:`tfopt.optimizer.system.cpu_threads.RuntimeSettings`, or None."""
        from tfopt.optimizer.system.cpu_threads import RuntimeSettings

        if self.intra_op_threads is None:
            return None
        return RuntimeSettings(intra_op_threads=self.intra_op_threads,
                               inter_op_threads=self.inter_op_threads,
                               omp_num_threads=self.intra_op_threads)

    def to_dict(self) -> dict:
        return {**record_to_dict(self), "serving": self.serving()}  # serving: for its readers

    @classmethod
    def from_dict(cls, data: dict) -> TunedRuntimeSettings:
        try:
            return record_from_dict(cls, data)
        except ValidationError as exc:
            raise RuntimeTuningError(f"not a runtime settings record: "
                                     f"{record_error_line(exc)}") from None

    def to_json(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the record to ``path`` (conventionally :data:`RUNTIME_SETTINGS_FILE` next to
        the artifact) in one rename."""
        from tfopt.optimizer.files.atomic import atomic_file

        with atomic_file(path, overwrite=overwrite) as staging:
            staging.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return Path(path)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> TunedRuntimeSettings:
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise RuntimeTuningError(f"cannot read {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise RuntimeTuningError(f"{path} is not JSON: {exc}") from None
        return cls.from_dict(data)

    def to_tags(self) -> dict[str, str]:
        """Flat string tags for MLflow; settings that do not apply are left out."""
        best = next((p for p in self.thread_probes if p.setting == self.threads), None)
        values = {
            "intra_op_threads": self.intra_op_threads,
            "inter_op_threads": self.inter_op_threads,
            "num_threads": self.num_threads,
            "recommended_batch_size": self.recommended_batch_size,
            "throughput_target": self.throughput_target,
            "latency_slo_ms": self.latency_slo_ms,
            "batch1_p50_ms": None if best is None else round(best.median_p50 * 1e3, 4),
            "ratio_to_reference": None if best is None else round(best.median_ratio, 4),
            "reference": self.reference.label,
            "available_cpus": self.available_cpus,
            "cpu_quota": self.cpu_quota,
            "cpu_model": self.cpu_model or None,
        }
        return {TAG_PREFIX + k: str(v) for k, v in values.items() if v is not None}
