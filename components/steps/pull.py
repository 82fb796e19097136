"""pull: the source SavedModel on local disk, fetched once per content, never half-written.

Sources: a local SavedModel directory or ``.tar.gz``/``.tgz`` of one; ``s3://bucket/prefix``
(the objects under the prefix are the SavedModel's files) or ``s3://bucket/key.tar.gz``;
``models:/name@alias`` or ``models:/name/version`` from the MLflow registry (an MLflow Model
yields the SavedModel its MLmodel names, as publish registers it). An archive whose only
top-level entry is a directory holding ``saved_model.pb`` yields that directory.

A pulled source lives in ``<workdir>/sources/<key>/``, its key named after what the source is:
for S3, a hash of endpoint, bucket and listing (key, size and ETag of every object), so an
unchanged prefix is reused after one LIST and no download, and a changed one is pulled again;
for a local path, the digest of its content. The directory is built beside its final place,
checked to be a SavedModel (parsed within limits and scanned for ops that touch files, the
network or Python: :mod:`tfopt.optimizer.model.op_scan`), given its marker (``pulled.json``) last, and
renamed into place: a pull killed midway leaves no marker, and the next pull starts over. A
local directory is checked before anything is copied, first that nothing in it leads out of it
(no symbolic link, hard link or special file: :mod:`tfopt.components.storage.model_tree`; with
``security.allow_internal_links``, links to its own files are copied as files); a refused
download leaves nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from tfopt.components.config.pipeline_config import PipelineConfig
from tfopt.components.pipeline.artifacts import PulledModel
from tfopt.components.storage.archive import extract_archive, is_archive
from tfopt.components.storage.digest import file_checksums
from tfopt.components.storage.model_tree import check_model_tree, copy_model_tree
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.errors import (
    CorruptSavedModelError,
    DangerousOpError,
    DestinationError,
    NotASavedModelError,
    SourceNotFoundError,
    TfoptError,
)
from tfopt.optimizer.files.atomic import (
    PARTIAL_MARK,
    atomic_directory,
    clean_stale_partials,
    hold_lock,
)
from tfopt.optimizer.model.footprint import disk_bytes
from tfopt.optimizer.model.op_scan import ScanPolicy
from tfopt.optimizer.model.savedmodel import read_saved_model_proto

log = logging.getLogger(__name__)

SOURCES_DIR = "sources"
MODEL_DIR = "model"
MARKER = "pulled.json"
_KEY_HEX = 24  # 96 bits: no collisions among the sources one workdir will ever see


def pull(config: PipelineConfig, *, s3_client=None, session=None) -> PulledModel:
    """The source of ``config`` as a local SavedModel directory, with its content digest.

    ``s3_client`` (or a boto3 ``session`` to build one from) replaces the client made from
    ``config.s3`` and the environment, e.g. one built from an Airflow connection.
    """
    source = config.source
    sources = Path(config.workdir).absolute() / SOURCES_DIR
    policy = config.security.scan_policy()  # what the source may hold: scanned before a copy
    # What killed pulls left behind; a pull running now holds its own (tfopt.optimizer.files.atomic).
    clean_stale_partials(sources)
    if source.startswith("models:/"):
        return _pull_registry(config, sources, policy)
    if source.startswith("s3://"):
        from tfopt.components.storage.s3 import make_client

        return _pull_s3(config, sources, s3_client or make_client(config.s3, session), policy)
    if "://" in source:
        raise TfoptError(f"unsupported source '{source}': use a local path, s3://bucket/prefix, "
                         f"s3://bucket/key.tar.gz or models:/name@alias")
    return _pull_local(source, sources, config.security.allow_internal_links, policy)


def from_inputs(call) -> PulledModel:
    """The table's entry (tfopt.components.pipeline.step_table): pull needs no earlier output."""
    return pull(call.config)


def find_savedmodel_root(directory: Path, uri: str, policy: ScanPolicy) -> Path:
    """``directory`` if it is a SavedModel, else its single top-level directory if that is one;
    parsed and scanned under ``policy``."""
    def holds_saved_model(path: Path) -> bool:
        return (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file()

    root = directory
    if not holds_saved_model(directory):
        entries = list(directory.iterdir()) if directory.is_dir() else []
        if len(entries) == 1 and entries[0].is_dir() and holds_saved_model(entries[0]):
            root = entries[0]
        else:
            raise NotASavedModelError(
                f"{uri} is not a SavedModel: no saved_model.pb at its top level nor in a single "
                f"top-level directory")
    try:
        read_saved_model_proto(root, policy)
    except (CorruptSavedModelError, NotASavedModelError, DangerousOpError) as exc:
        # The staging path in the message is gone by the time anyone reads it; the URI is not.
        raise type(exc)(str(exc).replace(str(root), uri)) from None
    return root


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_KEY_HEX]


def _reuse(target: Path, uri: str) -> PulledModel | None:
    """The finished pull in ``target``, or None when its marker is missing or unreadable."""
    marker = target / MARKER
    if not marker.is_file():
        return None
    try:
        done = json.loads(marker.read_text())
        path = target / done["model"]
        pulled = PulledModel(uri=uri, path=str(path), digest=done["digest"],
                             version=done.get("version"), size_bytes=disk_bytes(path))
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("ignoring the unreadable %s; pulling again", marker)
        return None
    if not path.is_dir():
        return None
    return pulled


def _write_marker(directory: Path, record: dict) -> None:
    target = directory / MARKER
    partial = target.with_name(f".{MARKER}.partial-{os.getpid()}")
    partial.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(partial, target)


def _store(target: Path, uri: str, fill: Callable[[Path], object], policy: ScanPolicy, *,
           expected_digest: str | None = None, version: str | None = None) -> PulledModel:
    """Build ``target`` with ``fill(model_dir)``, check it, mark it, and rename it into place."""
    if target.exists():
        done = _reused(target, uri)  # a concurrent pull may have finished meanwhile
        if done is not None:
            return done
        # A directory without a marker was not made by a pull (renames never leave one).
        log.warning("%s has no pull marker; pulling again", target)
        shutil.rmtree(target)
    try:
        with atomic_directory(target) as staging:
            staging.mkdir()
            fill(staging / MODEL_DIR)
            root = find_savedmodel_root(staging / MODEL_DIR, uri, policy)
            digest = model_digest(root)
            if expected_digest is not None and digest != expected_digest:
                raise TfoptError(f"{uri} changed while it was being copied; run the pull again")
            relative = root.relative_to(staging).as_posix()
            _write_marker(staging, {"source": uri, "model": relative, "digest": digest,
                                    "version": version})
    except DestinationError as exc:
        done = _reuse(target, uri)
        if done is None:
            # The staging path in the message is gone by the time anyone reads it (a full disk
            # while extracting names it); the target is where the space is missing.
            staged = re.escape(f"{target.parent}/.{target.name}.partial-")
            raise DestinationError(re.sub(rf"{staged}[^/]+/{re.escape(target.name)}",
                                          str(target), str(exc))) from None
        log.info("pull: a concurrent pull of %s finished first; using it", uri)
        return done
    pulled = PulledModel(uri=uri, path=str(target / relative), digest=digest, version=version,
                         size_bytes=disk_bytes(target / relative))
    log.info("pull: %s -> %s (%s)", uri, pulled.path, digest)
    return pulled


def _reused(target: Path, uri: str) -> PulledModel | None:
    done = _reuse(target, uri)
    if done is not None:
        log.info("pull: %s is unchanged; reusing %s", uri, done.path)
    return done


def _pull_local(source: str, sources: Path, allow_internal_links: bool, policy: ScanPolicy
                ) -> PulledModel:
    path = Path(source).expanduser()
    if not path.exists():
        raise SourceNotFoundError(f"no such source: {path}")
    if path.is_dir():
        # No link out of the model, before a byte of it is read (model_tree's docstring).
        check_model_tree(path, source, allow_links_inside=allow_internal_links)
        # before spending time hashing and copying
        root = find_savedmodel_root(path, source, policy)
        digest = model_digest(root)
        target = sources / f"dir-{_short(digest)}"
        return _reused(target, source) or _store(
            target, source, lambda model_dir: copy_model_tree(
                root, model_dir, source, allow_links_inside=allow_internal_links),
            policy, expected_digest=digest)
    if is_archive(path.name):
        target = sources / f"tar-{file_checksums(path).sha256_hex[:_KEY_HEX]}"
        return _reused(target, source) or _store(
            target, source, lambda model_dir: extract_archive(path, model_dir), policy)
    raise NotASavedModelError(
        f"{path} is a file, neither a SavedModel directory nor a .tar.gz/.tgz archive of one")


def _pull_s3(config: PipelineConfig, sources: Path, client, policy: ScanPolicy) -> PulledModel:
    from tfopt.components.storage import s3

    location = s3.parse_s3_uri(config.source)
    endpoint = s3.endpoint_of(client)
    if is_archive(location.key):
        obj = s3.stat_object(client, location.bucket, location.key)
        target = sources / f"s3-{s3.listing_identity(endpoint, location.bucket, [obj])[:_KEY_HEX]}"

        def fetch_and_extract(model_dir: Path) -> None:
            archive = PurePosixPath("source.tar.gz")
            s3.download_objects(client, location.bucket, [(obj, archive)], model_dir.parent,
                                config.s3)
            extract_archive(model_dir.parent / archive.name, model_dir)
            (model_dir.parent / archive.name).unlink()

        return _reused(target, config.source) or _store(target, config.source,
                                                         fetch_and_extract, policy)

    objects = s3.list_objects(client, location)
    # Every key is checked before anything is written.
    plan = s3.plan_downloads(objects, location.directory_prefix, location.bucket)
    if not plan:
        raise SourceNotFoundError(f"only empty folder markers under {location.uri}")
    target = sources / f"s3-{s3.listing_identity(endpoint, location.bucket, objects)[:_KEY_HEX]}"
    return _reused(target, config.source) or _store(
        target, config.source,
        lambda model_dir: s3.download_objects(client, location.bucket, plan, model_dir,
                                              config.s3), policy)


def _pull_registry(config: PipelineConfig, sources: Path, policy: ScanPolicy) -> PulledModel:
    from tfopt.components.storage.registry import download_registered_model

    # The registry says which version an alias names only by downloading it, so the download
    # lands in scratch space and is then filed under its content.
    sources.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".registry{PARTIAL_MARK}", dir=sources))
    lock = hold_lock(scratch)
    try:
        version = download_registered_model(config.source, scratch / MODEL_DIR,
                                            config.mlflow.tracking_uri)
        root = find_savedmodel_root(_saved_model_in(scratch / MODEL_DIR, config.source),
                                    config.source, policy)
        digest = model_digest(root)
        target = sources / f"mlflow-{_short(json.dumps([str(version), digest]))}"
        return _reused(target, config.source) or _store(
            target, config.source, lambda model_dir: os.rename(root, model_dir), policy,
            expected_digest=digest, version=str(version))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if lock is not None:
            os.close(lock)


def _saved_model_in(version_dir: Path, uri: str) -> Path:
    """Where a registry version keeps its SavedModel: inside an MLflow Model (what publish
    registers), the directory its MLmodel names; else the version's files themselves."""
    from tfopt.components.mlflow_models.mlmodel import (
        MLMODEL_FILE,
        artifact_inside,
        recorded_format,
    )

    mlmodel = version_dir / MLMODEL_FILE
    if not mlmodel.is_file():
        return version_dir
    fmt, runtime, artifact = recorded_format(mlmodel, uri, NotASavedModelError)
    if fmt != "savedmodel":
        raise NotASavedModelError(
            f"{uri} is an MLflow Model of a {fmt} model{f' for {runtime}' if runtime else ''}, "
            f"not a SavedModel: tfopt optimizes SavedModels (register the source model)")
    return artifact_inside(version_dir, artifact, uri, NotASavedModelError) if artifact \
        else version_dir
