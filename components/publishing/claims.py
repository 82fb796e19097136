"""One record per publish key where MLflow has no create-if-absent: a deterministic claim.

A run and a logged model are each found by the key their tags carry, or created; MLflow cannot
refuse a second one, so two publishes of one key at once (a task started twice, a retry while
the first attempt still runs) or one retried request can make two. Both agree on the winner:
the earliest made (creation time, then id), read back after creating and again after filling
it. A publish whose own record lost deletes it and fills the winner instead (the same content:
filling is idempotent); a record made by another publish is never deleted, since that publish
may still be writing into it. The winner is marked finished last, so a publish killed midway
leaves an unfinished record, which the rerun finds and fills again.

Two records remain only if the earlier-made one becomes visible after the later one's whole
filling (a commit delayed that long); never for registry versions, which settle on the lowest
version number instead (:mod:`tfopt.components.publishing.registry_protocol`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def claim(*, find: Callable[[], T | None], create: Callable[[], T], ident: Callable[[T], str],
          delete: Callable[[T], None], finished: Callable[[T], bool],
          fill: Callable[[T, bool], None], finish: Callable[[T], T], what: str) -> T:
    """The finished record of one key. ``find`` returns the earliest-made record holding the
    key; ``fill(record, created_here)`` writes its content, ``finish`` marks it finished."""
    record, created = find(), False
    if record is None:
        record, created = create(), True
        log.info("publish: created %s %s", what, ident(record))
        record, created = _settle(find, record, created, ident, delete, what)
    while True:
        if finished(record):
            log.info("publish: %s %s is already finished", what, ident(record))
            return record
        fill(record, created)
        # A racing publish's earlier record may have become visible while this one was filled.
        settled, created = _settle(find, record, created, ident, delete, what)
        if ident(settled) == ident(record):
            return finish(record)
        record = settled


def _settle(find, record, created: bool, ident, delete, what: str):
    """``(winner, created here)``; ``record`` is deleted if this publish created it and lost."""
    winner = find()
    if winner is None or ident(winner) == ident(record):
        return record, created
    log.warning("publish: a concurrent publish of the same key made %s %s first; using it%s",
                what, ident(winner), f" and deleting {ident(record)}" if created else "")
    if created:
        delete(record)
    return winner, False
