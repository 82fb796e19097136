"""Models from the MLflow model registry: ``models:/<name>@<alias>`` or ``models:/<name>/<version>``.

A version's files are downloaded into the destination directory all at once (built beside it,
then renamed into place), so a download killed midway leaves nothing that looks like a model.
What is downloaded is checked before it is renamed into place: plain files only, no links
(:mod:`tfopt.components.storage.model_tree`). Whether it is a SavedModel, a LiteRT file or an MLflow
Model is for the caller to read.
The version is resolved once, before downloading: an alias moved meanwhile cannot mix two
versions' files. A version's files never change once registered, which is what lets the champion
lookup keep one directory per version and reuse it.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

from tfopt.components.storage.model_tree import check_model_tree
from tfopt.components.tracking import is_missing, mlflow_client
from tfopt.optimizer.errors import NotASavedModelError, SourceNotFoundError
from tfopt.optimizer.files.atomic import atomic_directory

log = logging.getLogger(__name__)

_MODELS_URI = re.compile(r"^models:/(?P<name>[^@]+?)(?:@(?P<alias>[^/@]+)|/(?P<version>\d+))$")


def parse_models_uri(uri: str) -> tuple[str, str | None, str | None]:
    """``(name, alias, version)``; exactly one of alias and version is set."""
    match = _MODELS_URI.match(uri)
    if not match:
        raise SourceNotFoundError(f"{uri}: a registry source is models:/<name>@<alias> or "
                                  f"models:/<name>/<version>")
    return match["name"], match["alias"], match["version"]


def resolve_version(client, uri: str, tracking_uri: str) -> str:
    """The version number ``uri`` names now; unknown model, alias or version: one line naming it."""
    from mlflow.exceptions import MlflowException

    name, alias, version = parse_models_uri(uri)
    try:
        model = client.get_registered_model(name)
    except MlflowException as exc:
        if is_missing(exc):
            raise SourceNotFoundError(f"{uri}: no registered model '{name}' in MLflow at "
                                      f"{tracking_uri}") from None
        raise
    if alias is not None:
        if alias not in model.aliases:
            known = ", ".join(sorted(model.aliases)) or "none"
            raise SourceNotFoundError(f"{uri}: registered model '{name}' has no alias '{alias}' "
                                      f"(aliases: {known})")
        return str(model.aliases[alias])
    try:
        client.get_model_version(name, version)
    except MlflowException as exc:
        if is_missing(exc):
            raise SourceNotFoundError(f"{uri}: registered model '{name}' has no version "
                                      f"{version}") from None
        raise
    return version


def download_version(client, name: str, version: str, dest: str | os.PathLike,
                     tracking_uri: str) -> Path:
    """The files of version ``version`` of ``name``, as the directory ``dest`` (replaced whole)."""
    import mlflow.artifacts

    dest = Path(dest)
    # The version's storage location, asked of this client's registry: handing mlflow a
    # models:/ URI instead resolves it against MLflow's global registry URI, whatever
    # registry_uri is passed (a sqlite file in the working directory, created if missing).
    source = client.get_model_version_download_uri(name, version)
    with atomic_directory(dest, overwrite=True) as staging, tempfile.TemporaryDirectory(
            prefix=f".{dest.name}.download-", dir=dest.parent) as download_dir:
        log.info("downloading models:/%s/%s (%s) to %s", name, version, source, dest)
        # A directory artifact lands as <dst_path>/<its last path component>; mlflow returns
        # where, and that directory becomes the staged destination.
        fetched = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=download_dir,
                                                      tracking_uri=tracking_uri)
        if not Path(fetched).is_dir():
            raise NotASavedModelError(f"models:/{name}/{version} is the single file "
                                      f"{Path(fetched).name}, not a model directory")
        check_model_tree(fetched, f"models:/{name}/{version}")
        os.rename(fetched, staging)
    return dest


def download_registered_model(uri: str, dest: Path, tracking_uri: str) -> str:
    """Download the version ``uri`` names into ``dest`` (the SavedModel directory itself);
    returns that version."""
    name, _, _ = parse_models_uri(uri)
    with mlflow_client(tracking_uri) as client:
        version = resolve_version(client, uri, tracking_uri)
        download_version(client, name, version, dest, tracking_uri)
    log.info("%s is version %s", uri, version)
    return version
