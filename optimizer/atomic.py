"""Write a directory (or a file) all at once: build it beside the destination, then rename it.

A crash, an error or a kill leaves either the old destination or the new one, never a mix; the
staging directory is a hidden sibling so that the final rename stays on one filesystem.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from optimizer.errors import DestinationError


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
        staging_root = Path(tempfile.mkdtemp(prefix=f".{dst.name}.partial-", dir=dst.parent))
    except OSError as exc:
        raise DestinationError(f"cannot write {dst}: {exc.strerror or exc}") from None
    staging = staging_root / dst.name
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
