"""Registering a publish's model and moving its alias, safely under retries and races.

A version is made from the publish's logged model (its storage location and id), tagged with the
publish key, and found by it: of the versions carrying the key, the lowest number wins and the
others are deleted, by whichever publish sees them (numbers are given in commit order, so
whoever made a higher one sees the lowest). So a rerun of the same DAG run makes no second
version, even when MLflow's client retried a create whose answer timed out.

An alias moves only forward: to the newest version of its role (``tfopt.role``: champions and
challengers are counted apart, and a version without the tag is a champion, as every version
was before challengers), and once moved it is checked again against the versions registered
meanwhile. An alias already on a newer version stays there, so an old DAG run re-executed does
not take production back, and an older version a person moved the alias away from is never
brought back.

Every write of a publish goes through :class:`RaceTolerantClient`: racing publishes of one key
write the same tags, params and aliases at once, and the server's insert-or-update of a row is a
read then an insert, so one of two such writes fails on the unique constraint although the row
then holds the same value. A write that fails that way is tried once more, and then updates the
row.
"""

from __future__ import annotations

import logging

from tfopt.components.pipeline.artifacts import CandidateModel
from tfopt.components.publishing.publication import CHAMPION, PUBLISH_KEY_TAG, Publication
from tfopt.components.publishing.run_record import version_description, version_tags
from tfopt.components.tracking import TrackingError, is_missing

log = logging.getLogger(__name__)

ROLE_TAG = "tfopt.role"
ALIAS_CHECKS = 5  # rounds of "was a newer version registered while the alias moved?"
MODEL_DESCRIPTION = (
    "TensorFlow models optimized by tfopt, as MLflow Models. The 'champion' alias names the "
    "version its quality gate promoted last; 'challenger', when publish.register_rejected is "
    "set, the fastest candidate of the last run the gate rejected, tagged with why it lost.")


def find_version(client, name: str, key: str):
    """The lowest version carrying ``key``; any higher one is a duplicate and is deleted."""
    from mlflow.exceptions import MlflowException

    versions = client.search_model_versions(f"tags.`{PUBLISH_KEY_TAG}` = '{key}'")
    mine = sorted((v for v in versions if v.name == name), key=lambda v: int(v.version))
    for duplicate in mine[1:]:
        log.warning("publish: '%s' version %s duplicates version %s (same DAG run); deleting it",
                    name, duplicate.version, mine[0].version)
        # MLflow drops the aliases of a deleted version: one a racing publish set on this
        # duplicate goes to the version it duplicates (the same model, the same run) first.
        # (Searches leave versions' aliases out: the registered model names them.)
        aliases = client.get_registered_model(name).aliases
        for alias in sorted(a for a, v in aliases.items() if str(v) == str(duplicate.version)):
            log.info("publish: '%s@%s' moves from the duplicate %s to version %s", name, alias,
                     duplicate.version, mine[0].version)
            client.set_registered_model_alias(name, alias, mine[0].version)
        try:
            client.delete_model_version(name, duplicate.version)
        except MlflowException as exc:
            if not is_missing(exc):  # deleted meanwhile by a racing publish
                raise
    return mine[0] if mine else None


def register(client, pub: Publication, model: CandidateModel, logged_model, experiment: str,
             run) -> str:
    """The version registered from ``logged_model``, found by the publish key or created."""
    from mlflow.exceptions import MlflowException

    name = pub.config.mlflow.registered_model
    existing = find_version(client, name, pub.key)
    if existing is not None:
        log.info("publish: '%s' version %s is already registered", name, existing.version)
        return str(existing.version)
    try:
        client.create_registered_model(name, description=MODEL_DESCRIPTION)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    try:
        # The logged model's storage location, not models:/<model id>: a sqlite registry
        # resolves that through MLflow's global tracking URI, not this client's.
        version = client.create_model_version(
            name, source=logged_model.artifact_location, run_id=run.info.run_id,
            model_id=logged_model.model_id, await_creation_for=60,
            tags={**version_tags(pub, model), ROLE_TAG: pub.role},
            description=version_description(pub, model, experiment, run.info.run_id))
        log.info("publish: registered '%s' version %s", name, version.version)
    except MlflowException as exc:
        if not is_missing(exc):
            raise
        # A racing publish of the same key deleted it as a duplicate while it was awaited.
    winner = find_version(client, name, pub.key)
    if winner is None:
        raise TrackingError(f"'{name}': the version registered for this run is gone; "
                            f"run the publish again")
    return str(winner.version)


def distinct_versions(client, name: str, role: str) -> set[int]:
    """The version numbers of ``name`` in ``role``, less duplicates about to be deleted (see
    :func:`find_version`)."""
    lowest: dict[str, int] = {}
    for found in client.search_model_versions(f"name = '{name}'"):
        if found.tags.get(ROLE_TAG, CHAMPION) != role:
            continue
        key = found.tags.get(PUBLISH_KEY_TAG) or f"untagged {found.version}"
        lowest[key] = min(lowest.get(key, int(found.version)), int(found.version))
    return set(lowest.values())


def move_alias(client, pub: Publication, version: str) -> bool:
    """Whether the publish's alias now points at ``version``; never moved back from a newer
    version of the same role.

    The alias is read, then set: a publish of a newer version racing this one may set it in
    between, and this one would take it back. So the alias only moves to the newest version,
    and once moved, it is checked again against the versions registered meanwhile (which are
    newer, and concurrent).
    """
    from mlflow.exceptions import MlflowException

    name, alias, role = pub.config.mlflow.registered_model, pub.alias, pub.role
    known = distinct_versions(client, name, role)
    current = client.get_registered_model(name).aliases.get(alias)
    if current is not None and str(current) == version:
        return True
    newer = max([v for v in known if v > int(version)] + [int(current or 0)])
    if newer > int(version):
        log.warning("publish: '%s' has version %s, newer than this run's %s; '%s@%s' left on %s",
                    name, newer, version, name, alias, current)
        return False
    if current is not None:
        client.set_model_version_tag(name, version, "tfopt.replaced_version", str(current))
    client.set_registered_model_alias(name, alias, version)
    log.info("publish: '%s@%s' moved from %s to version %s", name, alias,
             f"version {current}" if current is not None else "nowhere", version)
    for _ in range(ALIAS_CHECKS):
        target = max(distinct_versions(client, name, role) - known | {int(version)})
        current = client.get_registered_model(name).aliases.get(alias)
        if current is not None and int(current) >= target:
            return str(current) == version
        log.info("publish: '%s@%s' goes to version %s, registered meanwhile", name, alias, target)
        try:
            client.set_registered_model_alias(name, alias, str(target))
        except MlflowException as exc:
            # Seen while a racing publish of its key had not yet deleted it as a duplicate.
            if not is_missing(exc):
                raise
            log.info("publish: version %s was deleted meanwhile (a duplicate); looking again",
                     target)
    return False


WRITE_CONFLICTS = ("IntegrityError", "UNIQUE constraint", "UniqueViolation", "Duplicate entry",
                   "duplicate key")


class RaceTolerantClient:
    """An MlflowClient whose calls are tried once more after losing a unique-constraint race."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name: str):
        from mlflow.exceptions import MlflowException

        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            try:
                return attribute(*args, **kwargs)
            except MlflowException as exc:
                if not any(marker in str(exc) for marker in WRITE_CONFLICTS):
                    raise
                log.info("publish: %s raced a concurrent write of the same row; once more", name)
                return attribute(*args, **kwargs)

        return call
