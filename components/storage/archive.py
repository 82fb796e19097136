"""Safe extraction of a ``.tar.gz`` model archive.

An archive comes from wherever the source points, so each member is checked before anything is
written: a member with an absolute path or a ``..`` segment could write outside the destination,
a symbolic or hard link could point outside it, and a device or FIFO has no place in a model.
Any of them refuses the whole archive, naming the member. Member count and total size are capped
so that a small archive cannot fill the disk. Python's own ``filter="data"`` runs as well, as a
second line of defence, and the extraction is built beside the destination and renamed into
place, so a refused or failed archive leaves nothing behind.
"""

from __future__ import annotations

import gzip
import logging
import os
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from tfopt.optimizer.errors import DestinationError, TfoptError
from tfopt.optimizer.files.atomic import atomic_directory

log = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
MAX_EXTRACTED_BYTES = 10 * 2**30
MAX_MEMBERS = 100_000


class UnsafeArchiveError(TfoptError):
    """An archive member would escape the destination, is a link or a device, or is too big."""


class CorruptArchiveError(TfoptError):
    """The file is not a readable gzip-compressed tar archive."""


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def check_member(member: tarfile.TarInfo) -> None:
    """Refuse a member that is not a plain file or directory safely inside the destination."""
    name = member.name
    if name.startswith("/") or PurePosixPath(name).is_absolute():
        raise UnsafeArchiveError(f"archive member '{name}' has an absolute path")
    if ".." in PurePosixPath(name).parts:
        raise UnsafeArchiveError(f"archive member '{name}' has a '..' path segment")
    if member.issym():
        raise UnsafeArchiveError(
            f"archive member '{name}' is a symbolic link (to '{member.linkname}')")
    if member.islnk():
        raise UnsafeArchiveError(f"archive member '{name}' is a hard link (to '{member.linkname}')")
    if not (member.isreg() or member.isdir()):
        raise UnsafeArchiveError(
            f"archive member '{name}' is a device, FIFO or other special file")


def _checked_members(tar: tarfile.TarFile, archive: Path, max_bytes: int,
                     max_members: int) -> list[tarfile.TarInfo]:
    members: list[tarfile.TarInfo] = []
    total = 0
    # Headers are read one at a time so that a bomb is refused at its first excess, before
    # millions of headers are held in memory.
    while (member := tar.next()) is not None:
        check_member(member)
        members.append(member)
        total += member.size
        if len(members) > max_members:
            raise UnsafeArchiveError(
                f"{archive.name} has more than {max_members} members; refused as an archive bomb")
        if total > max_bytes:
            raise UnsafeArchiveError(
                f"{archive.name} would extract to more than {max_bytes} bytes; "
                f"refused as an archive bomb")
    return members


def extract_archive(archive: str | os.PathLike, dest: str | os.PathLike, *,
                    max_bytes: int | None = None, max_members: int | None = None) -> Path:
    """Extract ``archive`` into ``dest``, which must not exist yet; it appears whole or not at all.

    The limits default to :data:`MAX_EXTRACTED_BYTES` and :data:`MAX_MEMBERS` (read at call
    time, so a deployment can change them).
    """
    archive, dest = Path(archive), Path(dest)
    max_bytes = MAX_EXTRACTED_BYTES if max_bytes is None else max_bytes
    max_members = MAX_MEMBERS if max_members is None else max_members
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = _checked_members(tar, archive, max_bytes, max_members)
            with atomic_directory(dest) as staging:
                staging.mkdir()
                try:
                    tar.extractall(staging, members=members, filter="data")
                except tarfile.FilterError as exc:
                    raise UnsafeArchiveError(f"{archive.name}: {exc}") from None
                except OSError as exc:  # the destination's fault (a full disk), not the archive's
                    raise DestinationError(f"cannot extract {archive.name} into {dest}: "
                                           f"{exc.strerror or exc}") from None
    except FileNotFoundError:
        raise CorruptArchiveError(f"no such archive: {archive}") from None
    except (tarfile.ReadError, tarfile.CompressionError, gzip.BadGzipFile, EOFError,
            zlib.error) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorruptArchiveError(f"{archive.name} is not a readable .tar.gz: {first}") from None
    log.info("extracted %d members of %s", len(members), archive.name)
    return dest
