"""An MlflowClient whose writes survive losing a race to an identical write.

Racing publishes of one key write the same tags, params and aliases at once, and the server's
insert-or-update of a row is a read then an insert: one of two such writes fails on the unique
constraint although the row then holds the same value. A write that fails that way is tried
once more, and then updates the row.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

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
