"""Runtime tuning: the thread settings and the batch size a model should be served with.

Threads. TensorFlow sizes its intra-op and inter-op thread pools once, when its runtime starts,
so every setting of the grid (:func:`thread_grid`: intra-op in {1, 2, CPUs} x inter-op in
{1, 2}, deduplicated and capped at the CPUs this process may use, cgroup quota included; for a
model whose runtime takes a thread count per model, only that count in {1, 2, CPUs}: a LiteRT
interpreter's ``num_threads``, ONNX Runtime's ``intra_op_num_threads``, OpenVINO's
``INFERENCE_NUM_THREADS``) gets a worker process of its own
(``python -m tfopt.optimizer.runtime_tuning.worker``) that applies the setting before TensorFlow
starts, loads the model through :func:`tfopt.optimizer.runtime.load_runner` (with ``num_threads`` for
a per-model runtime), calls it once, and reports back the setting in effect as the runtime reads
it (``tf.config.threading.get_*_parallelism_threads``, or the runner's own count).

Method (:func:`search_threads`): all workers start up front and stay alive, idle on a pipe, so
only one process runs the model at any time. Rounds interleave the settings: in each round every
worker in turn (order rotating by round) times batch-1 calls for ``seconds_per_probe`` and
reports their median. Within a round each setting's p50 is divided by the p50 of the
*reference* setting (what :func:`tfopt.optimizer.system.cpu_threads.default_runtime_settings` runs:
intra-op = CPUs, inter-op = 1) measured a moment before or after; a setting's score is the
median of those ratios over the rounds. Many short rounds (default 6 of 0.3 s, :class:`TuningSettings`) pair the
measurements closely in time, so load that drifts more slowly than a round hits every setting
alike and cancels in the ratio. A setting replaces the reference only if its score is below
``1 - min_gain`` (default 3%) *and* it was faster than the reference in enough rounds to pass a
one-sided sign test at 5% (6 of 6 rounds, 9 of 10; with fewer than 5 rounds no setting can pass, and
the reference stays). On a busy machine, where rounds swing by 2x, that keeps noise from
picking a setting. Every probe's per-round figures are kept in the result.

Batch size (:func:`measure_batch_curve`, :func:`recommend_batch`): p50 latency at batch sizes 1,
2, 4, ... 32 in one worker with the chosen threads, ascending, within a time budget (a batch
whose predicted cost would overrun it is left out and listed). Throughput = batch / p50. For a
throughput target (items/s) the recommendation is the smallest measured batch that reaches it;
for a latency SLO, the largest batch whose p50 is within it; for both, the smallest batch that
reaches the target within the SLO. When no measured batch qualifies, the recommendation is
``None`` and the reason says so, with the best figure measured.

:class:`TunedRuntimeSettings` holds the result: written as ``runtime_settings.json`` next to the
artifact (:meth:`~TunedRuntimeSettings.to_json`, atomically), with the environment variables
that apply it when serving (``TF_NUM_INTRAOP_THREADS``, ``TF_NUM_INTEROP_THREADS``,
``OMP_NUM_THREADS``; TensorFlow and TF Serving read the first two when no thread count is
configured) and the matching ``tensorflow_model_server`` flags; and as flat MLflow tags
(:meth:`~TunedRuntimeSettings.to_tags`, prefix ``tfopt.runtime.``).

Modules: :mod:`.grid` (settings, grid, serving env), :mod:`.probes` (the probe processes),
:mod:`.worker` (what runs in one), :mod:`.threads` (the search), :mod:`.batch` (curve and
recommendation), :mod:`.record` (the JSON and tags), :mod:`.tune` (all of it).
"""

from tfopt.optimizer.runtime_tuning.batch import (
    DEFAULT_BATCH_SIZES,
    BatchCurve,
    BatchPoint,
    BatchRecommendation,
    measure_batch_curve,
    recommend_batch,
)
from tfopt.optimizer.runtime_tuning.checks import RuntimeTuningError
from tfopt.optimizer.runtime_tuning.grid import (
    ThreadSetting,
    reference_setting,
    serving_env,
    thread_grid,
)
from tfopt.optimizer.runtime_tuning.record import (
    RUNTIME_SETTINGS_FILE,
    TAG_PREFIX,
    TunedRuntimeSettings,
)
from tfopt.optimizer.runtime_tuning.settings import TuningSettings
from tfopt.optimizer.runtime_tuning.threads import (
    ThreadProbe,
    ThreadSearch,
    choose_setting,
    search_threads,
)
from tfopt.optimizer.runtime_tuning.tune import tune_runtime

__all__ = [
    "DEFAULT_BATCH_SIZES", "RUNTIME_SETTINGS_FILE", "TAG_PREFIX", "BatchCurve", "BatchPoint",
    "BatchRecommendation", "RuntimeTuningError", "ThreadProbe", "ThreadSearch",
    "ThreadSetting", "TunedRuntimeSettings", "TuningSettings", "choose_setting", "measure_batch_curve",
    "recommend_batch", "reference_setting", "search_threads", "serving_env", "thread_grid",
    "tune_runtime",
]
