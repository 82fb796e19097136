"""Where a pipeline run keeps its work, and how a rerun finds work already done.

A run's work is keyed by (source digest, config fingerprint): the same model with the same
config lands in the same directory, so a retried Airflow task, or the same DAG run triggered
twice, reuses each finished step instead of redoing it. A step is finished when its
``result.json`` exists; that file is written last, by rename, so a step killed midway leaves no
result and simply runs again.

Runs on one source at once (the same DAG run triggered twice, or retried while the first try
still runs, over one shared volume) would otherwise both run a step into the same directory:
the second's output replaces the first's while the first's later steps read it (a rename
away then a rename in, so for a moment there is nothing there), and the record the first
wrote names a digest the files no longer have. So a step runs under an exclusive lock on its
directory (``flock`` on ``.step.lock``): the second run waits, then finds the result and
reuses it. A lock dies with its process, so a killed step's lock frees itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from tfopt.components.pipeline.artifacts import Record
from tfopt.optimizer.errors import DestinationError

log = logging.getLogger(__name__)
R = TypeVar("R", bound=Record)

RESULT_FILE = "result.json"
STEP_LOCK = ".step.lock"


def run_key(source_digest: str, config_fingerprint: str) -> str:
    """``<source digest>-<config hash>`` prefixes, without an algorithm prefix like ``sha256:``."""
    digest = source_digest.rpartition(":")[2]
    return f"{digest[:16]}-{config_fingerprint.rpartition(':')[2][:12]}"


class Workspace:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @classmethod
    def for_run(cls, workdir: str | os.PathLike, source_digest: str,
                config_fingerprint: str) -> Workspace:
        return cls(Path(workdir) / "runs" / run_key(source_digest, config_fingerprint))

    @staticmethod
    def keyed(step: str, *identity: str) -> str:
        """A step's name in the workspace, qualified by what its result depends on.

        ``keyed("benchmark", champion_digest)``: the same step against another baseline is
        another result, not a reuse of this one.
        """
        if not identity:
            return step
        digest = hashlib.sha256("\0".join(identity).encode()).hexdigest()[:12]
        return f"{step}-{digest}"

    @property
    def key(self) -> str:
        return self.root.name

    def step_dir(self, step: str) -> Path:
        path = self.root / step
        path.mkdir(parents=True, exist_ok=True)
        return path

    def finished(self, step: str) -> dict[str, Any] | None:
        target = self.root / step / RESULT_FILE
        if not target.is_file():
            return None
        try:
            return json.loads(target.read_text())
        except (OSError, json.JSONDecodeError):
            log.warning("ignoring an unreadable %s; the step runs again", target)
            return None

    def record(self, step: str, result: Record) -> None:
        target = self.step_dir(step) / RESULT_FILE
        partial = target.with_name(f".{RESULT_FILE}.partial-{os.getpid()}")
        try:
            partial.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
            os.replace(partial, target)
        except OSError as exc:
            # A full disk: the step's work stays unrecorded, so it runs again once there is room.
            partial.unlink(missing_ok=True)
            raise DestinationError(f"cannot write {target}: {exc.strerror or exc}") from None

    def reuse_or_run(self, step: str, kind: type[R], run: Callable[[Path], R]) -> R:
        """The recorded result of ``step`` if it finished before, else ``run(step_dir)``,
        under the step's lock (another process running it is waited for, then reused)."""
        done = self.finished(step)
        if done is None:
            with self._step_lock(step):
                done = self.finished(step)
                if done is None:
                    result = run(self.step_dir(step))
                    self.record(step, result)
                    return result
        log.info("%s: reusing the finished result in %s", step, self.root / step)
        return kind.from_dict(done)

    @contextlib.contextmanager
    def _step_lock(self, step: str) -> Iterator[None]:
        """An exclusive ``flock`` on the step directory's ``.step.lock``, waited for; where the
        filesystem cannot lock, none (the step runs unguarded, as before)."""
        path = self.step_dir(step) / STEP_LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            log.warning("%s: no lock (%s); running it unguarded", step, exc.strerror or exc)
            yield
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("%s: another run is running it; waiting for its result", step)
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:  # a filesystem without locks
                log.warning("%s: no lock (%s); running it unguarded", step,
                            exc.strerror or exc)
            yield
        finally:
            os.close(fd)
