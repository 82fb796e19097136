"""The production model a candidate must beat: the registry version the champion alias points at.

``find_champion`` returns it on local disk, ready to run in its own runtime, or None when there
is none yet: no registry (a local store whose database or directory does not exist), no such
registered model, or no such alias on it. A registry that is configured but unreachable is an
error, not "no champion": a candidate benchmarked against the unoptimized input instead of the
production model could be promoted while slower than what it replaces. For the same reason a
champion that cannot be used (its runtime is not installed, its artifact is corrupt, its format
is unknown) is a :class:`ChampionUnusableError`, never a silent fallback to the input.

The champion may be any format tfopt publishes. Its format is read from what the version
records, not guessed from file names:

- an MLflow Model (an ``MLmodel`` file, what publish registers): its ``metadata.tfopt`` block
  (format, runtime and the artifact's path inside the model), else its flavor (``tensorflow``:
  a SavedModel), read by :mod:`tfopt.components.mlflow_models.mlmodel`;
- a folder published before versions were MLflow Models: the version's ``tfopt.format`` and
  ``tfopt.runtime`` tags;
- a version registered by hand with neither: a SavedModel if it is one (the way a team
  bootstraps the registry with the model it serves today), else unusable.

Its runtime settings come with it: ``runtime_settings.json`` beside the artifact or at the
version's root, else the version's ``tfopt.runtime.*`` tags; a per-model thread count (LiteRT's ``num_threads``) is then
what the champion is benchmarked with.

Each version is downloaded once, to ``<workdir>/champions/<name>-v<version>/``, and reused: a
registered version's files never change. The download gets the guards a source gets: nothing in
it may be a link or special file (:mod:`tfopt.components.storage.model_tree`), and a SavedModel is
parsed within the size limits and scanned for dangerous ops before anything loads it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from urllib.parse import urlparse

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.mlflow_models.mlmodel import (
    MLMODEL_FILE,
    RUNTIME_SETTINGS_FILE,
    artifact_inside,
    recorded_format,
)
from tfopt.components.pipeline.artifacts import ChampionModel
from tfopt.components.storage.model_tree import check_model_tree
from tfopt.components.storage.registry import download_version
from tfopt.components.tracking import is_missing, mlflow_client
from tfopt.optimizer.errors import EXIT_CHAMPION_UNUSABLE, TfoptError, first_line

log = logging.getLogger(__name__)



class ChampionUnusableError(TfoptError):
    """The registry's champion cannot be run here: unknown format, runtime not installed, or a
    corrupt or unsafe artifact. Judging against the input instead could promote a slower model."""

    exit_code = EXIT_CHAMPION_UNUSABLE


def _local_store_missing(tracking_uri: str) -> bool:
    """Whether a local tracking store does not exist; looking it up would create an empty one."""
    parsed = urlparse(tracking_uri)
    if parsed.scheme == "sqlite":
        path = tracking_uri[len("sqlite:///"):]
        return path not in ("", ":memory:") and not Path(path).exists()
    if parsed.scheme in ("", "file"):
        return not Path(parsed.path or tracking_uri).exists()
    return False


def champion_dir(config: PipelineConfig, version: str) -> Path:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", config.mlflow.registered_model)
    return Path(config.workdir) / "champions" / f"{name}-v{version}"


def find_champion(config: PipelineConfig) -> ChampionModel | None:
    from mlflow.exceptions import MlflowException

    settings = config.mlflow
    name, alias, tracking_uri = settings.registered_model, settings.alias, settings.tracking_uri
    if _local_store_missing(tracking_uri):
        log.info("champion: no MLflow store at %s yet, so no champion", tracking_uri)
        return None
    with mlflow_client(tracking_uri) as client:
        try:
            model = client.get_registered_model(name)
        except MlflowException as exc:
            if not is_missing(exc):
                raise
            log.info("champion: no registered model '%s' yet, so no champion", name)
            return None
        if alias not in model.aliases:
            log.info("champion: '%s' has no alias '%s' yet, so no champion", name, alias)
            return None
        version = str(model.aliases[alias])
        tags = dict(client.get_model_version(name, version).tags)
        dest = champion_dir(config, version)
        if dest.is_dir():  # downloads are renamed into place whole
            log.info("champion: reusing %s (version %s of '%s')", dest, version, name)
        else:
            download_version(client, name, version, dest, tracking_uri)
    where = f"models:/{name}/{version} (the '{alias}' alias)"
    return usable_champion(dest, tags, uri=f"models:/{name}@{alias}", version=version,
                           where=where, signature=config.signature,
                           policy=config.security.scan_policy())


def usable_champion(directory: Path, tags: dict[str, str], *, uri: str, version: str,
                    where: str, signature: str, policy) -> ChampionModel:
    """The champion in ``directory`` as its version records it, checked to be runnable here (a
    SavedModel scanned under ``policy``, the model scan's)."""
    from tfopt.optimizer.benchmark.environment import model_digest
    from tfopt.optimizer.runtime import RUNTIMES

    try:
        check_model_tree(directory, where)
    except TfoptError as exc:
        raise ChampionUnusableError(str(exc)) from None
    fmt, runtime_name, artifact = _recorded_format(directory, tags, where)
    if fmt not in RUNTIMES:
        raise ChampionUnusableError(
            f"{where} is in format '{fmt}', which this tfopt cannot run (it runs "
            f"{', '.join(RUNTIMES)})")
    runtime = RUNTIMES[fmt]
    if not runtime.available():
        raise ChampionUnusableError(
            f"{where} is a {fmt} model for {runtime_name or runtime.name}, and the "
            f"{runtime.package} package is not installed here")
    path = _artifact_path(directory, artifact, runtime, where)
    _check_readable(path, fmt, signature, where, policy)
    threads = _recorded_threads(path, directory, tags, where)
    log.info("champion: %s is %s on %s%s", where, fmt, runtime_name or runtime.name,
             f", {threads['num_threads']} threads" if threads.get("num_threads") else "")
    return ChampionModel(uri=uri, version=version, path=str(path), directory=str(directory),
                         digest=model_digest(path.parent if path.is_file() else path),
                         format=fmt, runtime=runtime_name or runtime.name,
                         candidate=tags.get("tfopt.candidate"),
                         source_digest=tags.get("tfopt.source_digest") or None, **threads)


def _recorded_format(directory: Path, tags: dict[str, str],
                     where: str) -> tuple[str, str | None, str | None]:
    """``(format, runtime, artifact path inside directory or None)`` as the version records."""
    mlmodel = directory / MLMODEL_FILE
    if mlmodel.is_file():
        return recorded_format(mlmodel, where, ChampionUnusableError)
    if tags.get("tfopt.format"):
        return tags["tfopt.format"], tags.get("tfopt.runtime"), None
    from tfopt.optimizer.runtime.registry import SAVED_MODEL_FILES

    if any((directory / name).is_file() for name in SAVED_MODEL_FILES):
        return "savedmodel", None, None
    found = ", ".join(sorted(p.name for p in directory.iterdir())) or "nothing"
    raise ChampionUnusableError(
        f"{where} records no format (no MLmodel file, no tfopt.format tag) and is not a "
        f"SavedModel: its files are {found}")


def _artifact_path(directory: Path, artifact: str | None, runtime, where: str) -> Path:
    if artifact:
        return artifact_inside(directory, artifact, where, ChampionUnusableError)
    if runtime.suffix is None:
        return directory
    files = sorted(directory.glob(f"*{runtime.suffix}"))
    if len(files) != 1:
        raise ChampionUnusableError(
            f"{where} is recorded as {runtime.format} but holds "
            f"{len(files) or 'no'} *{runtime.suffix} file{'s' if len(files) != 1 else ''}")
    return files[0]


def _check_readable(path: Path, fmt: str, signature: str, where: str, policy) -> None:
    """Parse (and, for a SavedModel, scan) the artifact now: a corrupt champion fails here,
    with the version named, not in the middle of the benchmark."""
    from tfopt.optimizer.errors import DangerousOpError
    from tfopt.optimizer.runtime import read_signature

    try:
        read_signature(path, signature, format=fmt, policy=policy)
    except DangerousOpError:
        raise
    except TfoptError as exc:
        raise ChampionUnusableError(f"{where} cannot be read as {fmt}: {first_line(exc)}"
                                    ) from None


def _recorded_threads(path: Path, directory: Path, tags: dict[str, str],
                      where: str) -> dict[str, int | None]:
    """The runtime settings tuning recorded for the version: the JSON beside the artifact or
    at the version's root (an MLflow Model keeps it there), else the version's
    ``tfopt.runtime.*`` tags. A count below 1 is a damaged record: refused, naming the
    version (``where``), since the champion would otherwise run with settings nobody tuned."""
    import json

    beside = (path if path.is_dir() else path.parent) / RUNTIME_SETTINGS_FILE
    settings_file = beside if beside.is_file() else directory / RUNTIME_SETTINGS_FILE
    recorded: dict = {}
    if settings_file.is_file():
        try:
            recorded = json.loads(settings_file.read_text())
        except (OSError, ValueError):
            log.warning("champion: unreadable %s; using its tags", settings_file)
    names = ("num_threads", "intra_op_threads", "inter_op_threads")
    out: dict[str, int | None] = {}
    for name in names:
        value = recorded.get(name, tags.get(f"tfopt.runtime.{name}"))
        try:
            out[name] = int(value) if value not in (None, "", "None") else None
        except (TypeError, ValueError):
            out[name] = None
        if out[name] is not None and out[name] < 1:
            raise ChampionUnusableError(f"{where} records {name} {out[name]} in its runtime "
                                        f"settings; a thread count is at least 1")
    return out
