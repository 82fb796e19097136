"""Write a directory (or a file) all at once: build it beside the destination, then rename it.

A crash, an error or a kill leaves either the old destination or the new one, never a mix; the
staging directory is a hidden sibling so that the final rename stays on one filesystem.

A kill leaves the staging directory itself behind (``.<name>.partial-*``). Its writer holds an
exclusive ``flock`` on ``.lock`` inside it for as long as it writes; the kernel releases the lock
when the process dies, however it dies. :func:`clean_stale_partials` removes the staging
directories no live process holds: one whose lock it can take and that is older than
:data:`UNLOCKED_GRACE_SECONDS`, or one without a lock file (made by an older version, or killed
between creating it and locking it) older than :data:`STALE_PARTIAL_SECONDS`. Any number of runs
can clean one directory at once: each removes only what it holds the lock of itself.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tfopt.optimizer.errors import DestinationError

log = logging.getLogger(__name__)

PARTIAL_MARK = ".partial-"
LOCK_FILE = ".lock"
UNLOCKED_GRACE_SECONDS = 60.0  # covers the instant between creating a staging dir and locking it
STALE_PARTIAL_SECONDS = 3600.0  # a staging directory with no lock file at all


def _check_destination(dst: Path, overwrite: bool) -> None:
    if dst.exists() or dst.is_symlink():
        if not dst.is_dir():
            raise DestinationError(f"{dst} exists and is not a directory")
        if not overwrite:
            raise DestinationError(f"{dst} already exists; pass --overwrite to replace it")
    _check_parent_writable(dst)


def _check_parent_writable(dst: Path) -> None:
    """The nearest existing ancestor of ``dst`` is a directory this process may write in."""
    for ancestor in dst.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise DestinationError(f"cannot write {dst}: {ancestor} is not a directory")
            if not os.access(ancestor, os.W_OK | os.X_OK):
                raise DestinationError(f"cannot write {dst}: {ancestor} is not writable")
            break


def check_writable(dst: str | os.PathLike, overwrite: bool = False) -> Path:
    """Fail early, before minutes of work, when ``dst`` could not be written."""
    dst = Path(dst).absolute()
    _check_destination(dst, overwrite)
    return dst


@contextlib.contextmanager
def atomic_directory(dst: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a not-yet-existing staging path; on success it becomes ``dst`` in one rename."""
    dst = check_writable(dst, overwrite)
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        staging_root = Path(tempfile.mkdtemp(prefix=f".{dst.name}{PARTIAL_MARK}", dir=dst.parent))
    except OSError as exc:
        raise DestinationError(f"cannot write {dst}: {exc.strerror or exc}") from None
    staging = staging_root / dst.name
    lock = hold_lock(staging_root)
    try:
        yield staging
        if not staging.is_dir():
            raise RuntimeError(f"nothing was written to the staging directory for {dst}")
        if dst.exists():
            _check_destination(dst, overwrite)
            os.rename(dst, staging_root / f"{dst.name}.replaced")
        try:
            os.rename(staging, dst)
        except OSError as exc:
            raise DestinationError(f"cannot write {dst}: {exc.strerror or exc}") from None
    except OSError as exc:
        raise DestinationError(f"cannot write {dst}: {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(staging_root, ignore_errors=True)
        if lock is not None:
            os.close(lock)


def hold_lock(directory: Path) -> int | None:
    """An open descriptor holding an exclusive flock on ``directory/.lock`` (close it to let
    go), or None where the filesystem cannot lock: age alone then protects the directory."""
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def clean_stale_partials(directory: str | os.PathLike, *,
                         grace_seconds: float | None = None,
                         stale_seconds: float | None = None) -> list[Path]:
    """Remove the staging directories under ``directory`` that no live process writes (module
    docstring); returns those removed. Never raises: cleaning is a courtesy."""
    grace = UNLOCKED_GRACE_SECONDS if grace_seconds is None else grace_seconds
    stale = STALE_PARTIAL_SECONDS if stale_seconds is None else stale_seconds
    directory = Path(directory)
    removed: list[Path] = []
    try:
        entries = [e for e in os.scandir(directory)
                   if e.name.startswith(".") and PARTIAL_MARK in e.name]
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        path = Path(entry.path)
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        age = now - info.st_mtime
        try:
            fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = None
        except OSError:
            continue
        if fd is None:
            if age >= stale:
                _remove(path, removed, f"no lock file, {age:.0f} s old")
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                log.debug("cannot lock %s: %s", path, exc)
            continue  # a live process writes it
        try:
            # Locked the file still there, not one a cleaner before this one has just unlinked.
            if age >= grace and os.fstat(fd).st_ino == os.stat(
                    path / LOCK_FILE, follow_symlinks=False).st_ino:
                _remove(path, removed, "its writer is gone")
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _remove(path: Path, removed: list[Path], why: str) -> None:
    log.info("removing the stale staging directory %s (%s)", path, why)
    shutil.rmtree(path, ignore_errors=True)
    if not path.exists():
        removed.append(path)


def _check_file_destination(dst: Path, overwrite: bool) -> None:
    if dst.is_dir():
        raise DestinationError(f"{dst} exists and is a directory, not a file")
    if (dst.exists() or dst.is_symlink()) and not overwrite:
        raise DestinationError(f"{dst} already exists; pass --overwrite to replace it")
    _check_parent_writable(dst)


def check_file_writable(dst: str | os.PathLike, overwrite: bool = False) -> Path:
    """:func:`check_writable` for a single file."""
    dst = Path(dst).absolute()
    _check_file_destination(dst, overwrite)
    return dst


@contextlib.contextmanager
def atomic_file(dst: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a hidden sibling path to write; on success it replaces ``dst`` in one rename."""
    dst = check_file_writable(dst, overwrite)
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DestinationError(f"cannot write {dst}: {exc.strerror or exc}") from None
    # Named, not created (as mkstemp would, mode 0600): the writer creates it with the umask's
    # permissions, which the renamed file keeps.
    staging = dst.parent / f".{dst.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        yield staging
        if not staging.is_file():
            raise RuntimeError(f"nothing was written to the staging file for {dst}")
        _check_file_destination(dst, overwrite)
        os.replace(staging, dst)
    except OSError as exc:
        raise DestinationError(f"cannot write {dst}: {exc.strerror or exc}") from exc
    finally:
        staging.unlink(missing_ok=True)
