"""The pipeline's one YAML config, validated by typed models. Defaults live here and only here,
but for the keys that are the library's own settings (search, benchmark, tolerance): those are
declared with the settings' fields (:func:`~tfopt.optimizer.records.field_of`), so their defaults
and bounds live in the library, once.

Unknown keys and bad values are rejected with a message naming the key. Credentials never come
from this file: S3 keys come from the environment (or an Airflow connection, in the DAG), and the
models forbid extra keys, so a pasted ``aws_secret_access_key`` is an error, not a secret on disk.

    source: s3://bucket/models/digits     # or a local path, or models:/name@alias
    signature: serving_default
    optimize:
      recipe: "strip_unused_nodes remove_nodes(op=Identity) fold_constants(ignore_errors=true)"
    gate: {min_speedup: 1.05, max_accuracy_drop_abs: 0.005}
    mlflow: {tracking_uri: http://127.0.0.1:5000, registered_model: digits}

``--set key.path=value`` overrides any key from the command line: the operator's own flag. What
triggers a run (an asset event's extra, ``dag_run.conf``, ``tfopt run --conf``) may set only
``source``, ``evaluation.data`` and the keys ``triggers.allow_overrides`` lists, never those of
:data:`NEVER_FROM_A_TRIGGER` (components/config/trigger_conf.py checks it; docs/triggers.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from tfopt.optimizer.benchmark.settings import BenchmarkConfig
from tfopt.optimizer.errors import TfoptError, shown, validation_error_line
from tfopt.optimizer.gate.verdict import GateConfig
from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE, default_recipe
from tfopt.optimizer.records import field_of
from tfopt.optimizer.runtime.call_deadline import CallDeadline
from tfopt.optimizer.runtime_tuning.settings import TuningSettings
from tfopt.optimizer.search.precision.settings import PrecisionSearchSettings
from tfopt.optimizer.search.settings import SearchSettings
from tfopt.optimizer.verify.tolerance import Tolerance

log = logging.getLogger(__name__)


class ConfigError(TfoptError):
    """The pipeline config is missing, not YAML, or has an unknown key or a bad value."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OptimizeConfig(_Section):
    """The recipe, or the substitution search (its keys are the library's
    :class:`~tfopt.optimizer.search.settings.SearchSettings`), and the tolerance the result is checked
    within (:class:`~tfopt.optimizer.verify.tolerance.Tolerance`)."""

    recipe: str | list[Any] = Field(INFERENCE_RECIPE, description="GTT string or YAML list")
    backend: Literal["python", "native"] = Field(
        "python", description="python: this package's transforms; native: TF's C++ GTT")
    atol: float = field_of(Tolerance, "atol")
    rtol: float | None = field_of(Tolerance, "rtol")
    min_top1: float | None = field_of(Tolerance, "min_top1")
    strategy: Literal["recipe", "greedy", "relaxed"] = Field(
        "recipe", description="recipe: apply optimize.recipe; greedy/relaxed: substitution "
                              "search (recipe and backend unused)")
    alpha: float = field_of(SearchSettings, "alpha")
    budget: int = field_of(SearchSettings, "budget")
    time_budget_seconds: float = field_of(SearchSettings, "time_budget")
    cost: Literal["model", "measured"] = field_of(SearchSettings, "cost")

    @model_validator(mode="after")
    def _native_default_recipe(self) -> OptimizeConfig:
        # The default recipe holds transforms of this package's own, which TF's C++ tool lacks.
        if self.backend == "native" and "recipe" not in self.model_fields_set:
            object.__setattr__(self, "recipe", default_recipe("native"))
        return self


class BenchmarkSection(_Section):
    """The config's keys of the library's :class:`~tfopt.optimizer.benchmark.settings.BenchmarkConfig`
    (the benchmark step takes the promotion bound and the confidence from ``gate`` and the
    signature from the top level), and the threads the benchmark runs with."""

    # validate_default: the library's default is a tuple; the config holds lists
    batch_sizes: list[PositiveInt] = field_of(BenchmarkConfig, "batch_sizes",
                                              validate_default=True)
    warmup: int = field_of(BenchmarkConfig, "warmup")
    min_runs: int = field_of(BenchmarkConfig, "min_runs")
    min_seconds: float = field_of(BenchmarkConfig, "min_seconds")
    block_size: int = field_of(BenchmarkConfig, "block_size")
    block_seconds: float = field_of(BenchmarkConfig, "block_seconds")
    max_seconds: float | None = field_of(BenchmarkConfig, "max_seconds")
    twin: bool = field_of(BenchmarkConfig, "twin")
    threads: int | None = Field(None, ge=1, description="default: CPUs really available")

    def settings(self, **others) -> BenchmarkConfig:
        """The library's settings from this section's keys, plus ``others`` from elsewhere."""
        keys = set(type(self).model_fields) - {"threads"}
        return BenchmarkConfig(**{key: getattr(self, key) for key in keys}, **others)


class EvaluationConfig(_Section):
    data: str | None = Field(
        None, description=".npz with x/y or a TFRecord; local or s3://. Labels the metric cannot "
                          "score against the model's output (read from its signature) stop the "
                          "run at freeze, in one line naming both shapes")
    metric: str = Field("top1", description="top1 (one label per row, or per position for a "
                                            "tagger's [rows, positions, tags] output), or "
                                            "mse/mae for regression")


class CalibrationConfig(_Section):
    """Representative inputs for int8 candidates (optimizer/inputs/calibration.py): no labels needed."""

    data: str | None = Field(
        None, description=".npz of inputs (x, or one array per input key) or a TFRecord of "
                          "them; local or s3://. Default: evaluation.data, else inputs "
                          "generated from the signature (tagged synthetic)")


class MlflowConfig(_Section):
    tracking_uri: str = Field("sqlite:///work/mlflow/mlflow.db",
                              description="an mlflow server URL, or a local sqlite store")
    experiment: str = Field("tfopt", description="experiment the runs are logged to")
    registered_model: str = Field("tfopt-model", description="registry name of the model")
    alias: str = Field("champion", description="moved to a new version only on a pass")


class PublishConfig(_Section):
    """What publish registers besides a promoted model (components/steps/publish.py)."""

    register_rejected: bool = Field(
        False, description="when the gate rejects, register the fastest candidate anyway, "
                           "with the 'challenger' alias and a tag saying why it lost")


class S3Config(_Section):
    endpoint_url: str | None = Field(None, description="for S3-compatible stores")
    region: str | None = Field(None, description="default: the environment's")
    max_attempts: int = Field(5, ge=1, description="boto3 'standard' retry mode attempts")
    multipart_threshold_mb: int = Field(64, ge=5, description="TransferConfig threshold")
    max_concurrency: int = Field(4, ge=1, description="TransferConfig parallel transfers")
    connect_timeout: float = Field(10, gt=0, description="seconds")
    read_timeout: float = Field(60, gt=0, description="seconds")


class KubernetesConfig(_Section):
    image: str = Field("tfopt:0.1.0", description="the project image the pods run")
    namespace: str = Field("default", description="where the step pods run")
    cpu_request: str = Field("2", description="per step pod")
    cpu_limit: str = Field("2", description="request = limit: a whole, quiet node share")
    memory_request: str = Field("4Gi", description="the pull pod's; the later pods' are sized "
                                                   "from the model it pulled")
    memory_limit: str = Field("8Gi", description="the pull pod's; the later pods' are sized "
                                                 "from the model it pulled")
    node_selector: dict[str, str] = Field(
        default_factory=lambda: {"workload": "cpu-benchmark"},
        description="where the benchmark pod runs")
    config_path: str = Field("/etc/tfopt/pipeline.yaml",
                             description="where the pod finds this config")


class ExecutionConfig(_Section):
    mode: Literal["in_process", "kubernetes"] = Field(
        "in_process", description="tasks in the worker, or KubernetesPodOperator pods")
    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)


class ResourcesConfig(_Section):
    memory_gb: float | None = Field(
        None, gt=0, description="memory budget in GiB where no cgroup limit applies (a pod's "
                                "limit wins when it is tighter); default: the machine's "
                                "available memory")
    model_call_seconds: float = field_of(
        CallDeadline, "min_seconds",
        description="seconds a model call may take at least: each call's deadline is this or "
                    "model_call_multiple x the model's first call, whichever is longer; a call "
                    "past it stops the run (exit 9, nothing published)")
    model_call_multiple: float = field_of(
        CallDeadline, "first_call_multiple",
        description="a model call may take this many times the model's first call (when that "
                    "is longer than model_call_seconds)")
    task_timeout_minutes: float = Field(
        360, gt=0, description="the Airflow DAG's execution_timeout for every task, in process "
                               "or in its pod: a task still running after this long is "
                               "failed (and retried), so one stuck run cannot hold the DAG, "
                               "which runs one at a time; keep it above model_call_seconds")
    pod_memory_gb: dict[str, float] = Field(
        default_factory=dict,
        description="GiB of memory (request = limit) for a step's pod in Kubernetes and "
                    "Kubeflow modes, e.g. {benchmark: 12}, instead of the estimate from the "
                    "model's size (components/pipeline/step_table.py)")

    def call_deadline(self) -> CallDeadline:
        """The deadline of every model call of a run (optimizer/runtime/call_deadline.py)."""
        return CallDeadline(min_seconds=self.model_call_seconds,
                            first_call_multiple=self.model_call_multiple)

    @field_validator("pod_memory_gb")
    @classmethod
    def _sized_steps(cls, value: dict[str, float]) -> dict[str, float]:
        from tfopt.components.pipeline.step_table import BY_NAME

        sized = [name for name, step in BY_NAME.items() if step.memory]
        for name, gib in value.items():
            if name not in sized:
                raise ValueError(f"no step '{name}' is sized from the model; steps: "
                                 f"{', '.join(sized)}")
            if not gib > 0:
                raise ValueError(f"{name}: memory must be positive")
        return value


class ScheduleConfig(_Section):
    cron: str | None = Field("0 3 * * *", description="null: manual and asset triggers only")
    asset: str | None = Field(
        None, description="URI of the asset a training job posts an event for (see Airflow)")
    retries: int = Field(2, ge=0, description="per task, with exponential backoff")
    retry_delay_seconds: int = Field(60, ge=1, description="first retry delay")


class CandidatesConfig(_Section):
    """Which runtimes the result may need; optimizer/candidates/build.py builds the candidates."""

    targets: list[Literal["savedmodel", "litert", "onnx", "openvino"]] = Field(
        default_factory=lambda: ["savedmodel"],
        description="savedmodel (TF Serving, tf.saved_model.load), litert (ai-edge-litert), "
                    "onnx (onnxruntime), openvino; a TF Serving site allows only savedmodel")
    savedmodel_variants: list[Literal["bf16", "xla"]] = Field(
        default_factory=lambda: ["bf16", "xla"],
        description="besides the optimized fp32 graph: bf16 (native bfloat16 CPUs only), xla")
    litert_flavours: list[Literal["fp32", "fp16", "dynamic_int8", "full_int8"]] = Field(
        default_factory=lambda: ["fp32", "fp16", "dynamic_int8", "full_int8"],
        description="with the litert target; full_int8 calibrates (see calibration.data)")
    onnx_flavours: list[Literal["fp32", "optimized", "dynamic_int8", "static_int8"]] = Field(
        default_factory=lambda: ["fp32", "optimized", "dynamic_int8", "static_int8"],
        description="with the onnx target; static_int8 calibrates (see calibration.data)")
    openvino_flavours: list[Literal["fp32", "bf16", "int8"]] = Field(
        default_factory=lambda: ["fp32", "bf16", "int8"],
        description="with the openvino target: bf16 on native bfloat16 CPUs only; int8 "
                    "calibrates (see calibration.data)")
    calibration_samples: int = Field(100, ge=1, description="rows that calibrate the int8 "
                                                            "candidates")
    # declared once, in optimizer/search/precision/settings.py (docs/precision_search.md)
    precision_search: Literal["auto", "off", "greedy", "relaxed"] = field_of(
        PrecisionSearchSettings, "mode")

    @field_validator("targets")
    @classmethod
    def _some_target(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one target is needed: savedmodel, litert, onnx, "
                             "openvino")
        return value

    def settings(self):
        from tfopt.optimizer.candidates.build import CandidateSettings

        return CandidateSettings(targets=tuple(self.targets),
                                 savedmodel_variants=tuple(self.savedmodel_variants),
                                 litert_flavours=tuple(self.litert_flavours),
                                 onnx_flavours=tuple(self.onnx_flavours),
                                 openvino_flavours=tuple(self.openvino_flavours),
                                 calibration_samples=self.calibration_samples)


class TuningConfig(_Section):
    """Thread settings and batch size measured for the chosen model, recorded with it
    (optimizer/runtime_tuning/): MLflow tags and runtime_settings.json beside the model. How
    long it measures are the library's
    :class:`~tfopt.optimizer.runtime_tuning.settings.TuningSettings`."""

    enabled: bool = Field(True, description="tune the chosen candidate after the gate")
    rounds: int = field_of(TuningSettings, "rounds")
    seconds_per_probe: float = field_of(TuningSettings, "seconds_per_probe")
    time_budget_seconds: float = field_of(TuningSettings, "time_budget_seconds")
    throughput_target: float | None = Field(
        None, gt=0, description="items/s: recommend the smallest batch size reaching it")
    latency_slo_ms: float | None = Field(
        None, gt=0, description="recommend the largest batch size whose p50 is within it")


class SecurityConfig(_Section):
    """What a model from outside may be; optimizer/model/op_scan.py lists the refused op types."""

    extra_denied_ops: list[str] = Field(
        default_factory=list, description="op types refused besides the built-in list")
    allow_ops: list[str] = Field(
        default_factory=list, description="op types the model scan refuses that this site "
                                          "trusts, e.g. [PrintV2]")
    max_saved_model_mb: int = Field(2048, ge=1, le=2048,
                                    description="largest saved_model.pb parsed (protobuf's "
                                                "own limit is 2 GiB)")
    max_parse_memory_mb: int = Field(8192, ge=64,
                                     description="most memory a saved_model.pb may take to "
                                                 "parse")
    allow_internal_links: bool = Field(
        False, description="a local source may hold symbolic links to its own plain files "
                           "(and hard links among them): each is copied as a file; a link "
                           "out of the model is refused whatever this says")

    @field_validator("allow_ops")
    @classmethod
    def _deniable(cls, value: list[str], info) -> list[str]:
        from tfopt.optimizer.model.op_scan import ScanPolicy, ScanPolicyError

        try:
            ScanPolicy.create(value, info.data.get("extra_denied_ops", ()))
        except ScanPolicyError as exc:
            raise ValueError(str(exc)) from None
        return value

    def scan_policy(self):
        from tfopt.optimizer.model.op_scan import MIB, ScanPolicy

        return ScanPolicy.create(self.allow_ops, self.extra_denied_ops,
                                 max_pb_bytes=self.max_saved_model_mb * MIB,
                                 max_parse_memory_bytes=self.max_parse_memory_mb * MIB)


# Keys a trigger may never set, whatever the YAML lists, and why: each would hand whoever posts
# an event the worker's credentials, its files, or the checks that stand between a model and
# the registry. A listed key that is one of these, or under one, is a config error.
NEVER_FROM_A_TRIGGER = {
    "security": "the op scan and the model's limits",
    "mlflow": "where the worker's MLflow credentials are sent, and which model is replaced",
    "s3": "where the worker's S3 keys are sent",
    "workdir": "where the run writes files",
    "resources": "the memory budget",
    "triggers": "what a trigger may set",
    "execution": "fixed when the DAG is parsed",
    "schedule": "fixed when the DAG is parsed",
}
# What a trigger may set with no allow-list: the model it hands over and the data to judge it.
TRIGGER_DEFAULT_KEYS = ("source", "evaluation.data")


def never_from_a_trigger(dotted: str) -> str | None:
    """Why ``dotted`` may never come from a trigger, or None when it may be allowed."""
    top = dotted.split(".", 1)[0]
    return NEVER_FROM_A_TRIGGER.get(top)


def is_config_key(dotted: str) -> bool:
    """Whether ``dotted`` names a key or a section of :class:`PipelineConfig`."""
    model: type[BaseModel] | None = PipelineConfig
    for part in dotted.split("."):
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return False
        annotation = field.annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) \
            else None
    return True


class TriggersConfig(_Section):
    """What whoever triggers a run may set (components/config/trigger_conf.py, docs/triggers.md)."""

    allow_overrides: list[str] = Field(
        default_factory=list,
        description="config keys (gate.min_speedup) or sections (tuning) that an asset "
                    "event's extra, a dag_run.conf and tfopt run --conf may set, besides "
                    f"{' and '.join(TRIGGER_DEFAULT_KEYS)}; never "
                    f"{', '.join(NEVER_FROM_A_TRIGGER)}")

    @field_validator("allow_overrides")
    @classmethod
    def _grantable(cls, value: list[str]) -> list[str]:
        for key in value:
            reason = never_from_a_trigger(key)
            if reason:
                raise ValueError(f"{shown(key)!r} can never come from a trigger ({reason})")
            if not is_config_key(key):
                raise ValueError(f"{shown(key)!r} is not a config key")
        return value


class PipelineConfig(_Section):
    source: str = Field(description="s3://bucket/prefix, a local path, or models:/name@alias")
    signature: str = field_of(BenchmarkConfig, "signature",
                              description="the signature to optimize")
    workdir: str = Field("work/pipeline", description="local working directory")
    optimize: OptimizeConfig = Field(default_factory=OptimizeConfig)
    benchmark: BenchmarkSection = Field(default_factory=BenchmarkSection)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig)
    publish: PublishConfig = Field(default_factory=PublishConfig)
    s3: S3Config = Field(default_factory=S3Config)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    candidates: CandidatesConfig = Field(default_factory=CandidatesConfig)
    tuning: TuningConfig = Field(default_factory=TuningConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    triggers: TriggersConfig = Field(default_factory=TriggersConfig)

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        return read_renamed_keys(data)

    @field_validator("source")
    @classmethod
    def _source_shape(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("source must not be empty")
        if value.startswith("models:/") and "@" not in value and value.count("/") < 2:
            raise ValueError("a registry source is models:/<name>@<alias> or "
                             "models:/<name>/<version>")
        return value

    def fingerprint(self) -> str:
        """Hash of what changes the pipeline's result; scheduling, execution mode, workdir, the
        memory budget and the URL MLflow is reached at don't (``localhost`` and ``127.0.0.1`` are one server: the
        publish step tells servers apart by what the server reports, not by its URL)."""
        relevant = self.model_dump(mode="json", exclude=FINGERPRINT_EXCLUDES)
        blob = json.dumps(relevant, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


# Keys that moved: old dotted key -> new one. A config holding the old key still loads, with
# a warning naming the new key; one holding both with different values is refused.
RENAMED_KEYS = {
    # one level for timing and deciding: the gate's, which the benchmark step passes on
    "benchmark.confidence": "gate.confidence",
}


def read_renamed_keys(data: Any) -> Any:
    """``data`` with each key of :data:`RENAMED_KEYS` moved to its new name (a copy)."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for old, new in RENAMED_KEYS.items():
        (old_section, old_key), (new_section, new_key) = old.split("."), new.split(".")
        section = data.get(old_section)
        if not isinstance(section, dict) or old_key not in section:
            continue
        section = dict(section)
        value = section.pop(old_key)
        data[old_section] = section
        target = data.get(new_section) or {}
        if not isinstance(target, dict):
            continue  # the section itself is malformed: its own validation says so
        target = dict(target)
        if new_key in target and target[new_key] != value:
            raise ConfigError(f"{old} ({value!r}) is deprecated and differs from {new} "
                              f"({target[new_key]!r}); give only {new}")
        target[new_key] = value
        data[new_section] = target
        log.warning("config: %s is deprecated; it is read as %s (write %s instead)",
                    old, new, new)
    return data


FINGERPRINT_EXCLUDES = {"schedule": True, "execution": True, "workdir": True, "resources": True,
                        "triggers": True, "mlflow": {"tracking_uri"}}


# The most values a config may expand to: a real one has a few hundred. YAML anchors let a few
# hundred characters name billions of values (a "billion laughs"), which copying would build.
MAX_CONFIG_VALUES = 100_000


class _AliasError(Exception):
    pass


@functools.cache
def _no_alias_loader():
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        """``yaml.safe_load``'s loader, refusing anchors and aliases: an override is one value
        on one line, and an alias is how a short value becomes a huge one."""

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise _AliasError
            return super().compose_node(parent, index)

    return NoAliasLoader


def parse_override_value(raw: str, what: str) -> Any:
    """An override's text as YAML (``1.2`` a number, ``[1, 32]`` a list), or as the string it
    is when it is not YAML. ``what`` names it in the error: an anchor or alias is refused."""
    import yaml

    if raw == "":
        return ""
    try:
        return yaml.load(raw, Loader=_no_alias_loader())  # a SafeLoader: no tags
    except _AliasError:
        raise ConfigError(f"{what}: YAML anchors and aliases (& and *) are not allowed in a "
                          f"value") from None
    except yaml.YAMLError:
        return raw
    except RecursionError:
        raise ConfigError(f"{what}: the value is nested too deeply") from None


def _set_path(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    # repr: the text is the user's, and an error message stays on one line.
    if not all(keys):
        raise ConfigError(f"--set {dotted!r}: empty key")
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted!r}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def _expanded_size(data: Any, limit: int) -> int:
    """How many values ``data`` holds once every shared (aliased) value is copied out, counted
    without copying; past ``limit`` the count stops. A value that contains itself counts once
    (the copy refuses it)."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, (dict, list)):
            return 1
        known = sizes.get(id(value))
        if known is not None:
            return known
        sizes[id(value)] = 1  # a cycle back to here counts once
        children = value.values() if isinstance(value, dict) else value
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                break
        sizes[id(value)] = total
        return total

    return size(data)


def _plain_copy(data: Any, where: str) -> Any:
    """A deep copy, refusing what YAML can hold but a config cannot: dates, sets, binary,
    anchors that make a value contain itself, and aliases that expand it past
    :data:`MAX_CONFIG_VALUES`."""
    try:
        if _expanded_size(data, MAX_CONFIG_VALUES) > MAX_CONFIG_VALUES:
            raise ConfigError(f"{where}: the config expands to more than {MAX_CONFIG_VALUES} "
                              f"values (YAML aliases repeating a value?)")
        return json.loads(json.dumps(data))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{where}: the config holds a value that is not plain data "
                          f"({str(exc).splitlines()[0]}); quote dates, and use strings, "
                          f"numbers, true/false, null, lists and mappings") from None


def apply_overrides(data: dict, overrides: list[str] | dict | None,
                    where: str = "config") -> dict:
    """``["a.b=1", ...]`` (the text after ``=`` read as YAML) or ``{"a.b": value}`` (a string
    value read as YAML, others taken as they are) applied on top of a config mapping."""
    data = _plain_copy(data, where)
    if not overrides:
        return data
    if isinstance(overrides, dict):
        for key, value in overrides.items():
            if isinstance(value, str):
                value = parse_override_value(value, f"--set {key!r}")
            _set_path(data, key, value)
    else:
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--set takes key=value, got {item!r}")
            key = key.strip()
            _set_path(data, key, parse_override_value(value, f"--set {key!r}"))
    return _plain_copy(data, where)  # an override's YAML value may be a date, too


def config_from_mapping(data: Any, where: str = "config",
                        overrides: list[str] | dict | None = None) -> PipelineConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the config is a mapping of keys to values, "
                          f"got {type(data).__name__}")
    try:
        return PipelineConfig.model_validate(apply_overrides(data, overrides, where))
    except ValidationError as exc:
        raise ConfigError(validation_error_line(exc, where)) from None


def load_config(path: str | os.PathLike | None, overrides: list[str] | dict | None = None,
                triggers: list | None = None) -> PipelineConfig:
    """Read YAML with ``yaml.safe_load`` (no Python tags, no code), validate, apply overrides.

    ``overrides`` are the operator's (``--set``): any key. ``triggers``
    (:class:`tfopt.components.config.trigger_conf.Trigger`: an asset event's extra, a ``dag_run.conf``) come
    between the YAML and them, and may set only what the operator's ``triggers`` section
    allows; a trigger that sets anything else is refused, naming the key."""
    from tfopt.optimizer.files.yaml_files import read_yaml_file

    data = read_yaml_file(path, "config file", ConfigError) if path is not None else {}
    data = {} if data is None else data  # an empty file: every key from the overrides
    where = str(path) if path is not None else "defaults"
    operator = config_from_mapping(data, where, overrides)
    if not triggers:
        return operator
    from tfopt.components.config.trigger_conf import trigger_overrides

    data = apply_overrides(data, trigger_overrides(triggers, operator.triggers), where)
    return config_from_mapping(data, where, overrides)


def example_yaml(source: str) -> str:
    """Every key of :class:`PipelineConfig` with its default, each described in a comment: the
    YAML ``tfopt config --example`` prints, which loads back as the defaults (with ``source``,
    the one required key, set to ``source``)."""
    lines = ["# tfopt pipeline config: every key, its default and what it means.",
             "# Generated from the config's models (tfopt config --example); delete what you",
             "# keep at its default.", ""]
    _example_lines(PipelineConfig, {"source": source}, 0, lines)
    return "\n".join(lines) + "\n"


def _example_lines(model: type[BaseModel], given: dict, depth: int, lines: list[str]) -> None:
    from typing import get_args, get_origin

    indent = "  " * depth
    for name, field in model.model_fields.items():
        annotation = field.annotation
        description = field.description or ""
        if get_origin(annotation) is Literal:
            choices = ", ".join(str(choice) for choice in get_args(annotation))
            description = f"{description} (one of: {choices})" if description \
                else f"one of: {choices}"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if depth == 0:
                lines.append("")
            lines += _comment((annotation.__doc__ or "").strip().split("\n\n")[0], indent)
            lines.append(f"{indent}{name}:")
            _example_lines(annotation, {}, depth + 1, lines)
            continue
        if field.is_required():
            value, description = given[name], f"required: {description}"
        else:
            value = field.get_default(call_default_factory=True)
        lines += _comment(description, indent)
        lines.append(f"{indent}{name}: {_yaml_value(value)}")


def _comment(text: str, indent: str) -> list[str]:
    """``text`` (a description, a docstring's first paragraph) as wrapped YAML comment lines,
    without its reStructuredText markup."""
    import re
    import textwrap

    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([\w]+)`", r"\1", text).replace("``", "")
    return [f"{indent}# {line}" for line in textwrap.wrap(" ".join(text.split()),
                                                          96 - len(indent))]


def _yaml_value(value: Any) -> str:
    """``value`` as YAML flow text that reads back as the same value."""
    if isinstance(value, float):
        text = repr(value)
        # PyYAML reads 1e-05 (no dot in the mantissa) as a string
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_yaml_value(v)}"
                               for k, v in value.items()) + "}"
    return json.dumps(value)  # null, true/false, ints and quoted strings are YAML too
