"""What a model directory may hold: plain files and directories, nothing that points elsewhere.

A model is copied, uploaded and served as a tree of files. A symbolic link inside it would carry
whatever it points at (a host file, another model) along with it; a hard link shares its content
with a file outside the tree; a device or FIFO is no model file at all. Archives are held to the
same rule member by member (:mod:`tfopt.components.storage.archive`); a downloaded registry version,
a local source directory and every directory publish uploads are held to it here, before
anything reads them.

A local source may be allowed links that stay inside it (``security.allow_internal_links``): a
symbolic link whose target, every link on the way resolved, is a plain file inside the source
directory, and a hard link all of whose names are inside it. :func:`copy_model_tree` copies
such a tree without ever following a link the check did not allow: each file is opened without
following links, relative to its already opened directory, so a link swapped in after the check
fails the copy instead of being read; an allowed link becomes a plain copy of its target.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from tfopt.optimizer.errors import TfoptError

ALLOW_INTERNAL_LINKS = "security.allow_internal_links"


class UnsafeModelTreeError(TfoptError):
    """A model directory holds a link or a special file."""


def _inside(target: str, real_root: str) -> bool:
    return target == real_root or target.startswith(real_root.rstrip(os.sep) + os.sep)


def _link_target(path: Path, entry: str, real_root: str, where: str,
                 allow_links_inside: bool) -> str:
    """The real path of the symbolic link ``path``, when it may be copied as a file; else the
    one-line refusal naming ``entry``."""
    pointed = os.readlink(path)
    target = os.path.realpath(path)
    inside = _inside(target, real_root)
    if not inside:
        raise UnsafeModelTreeError(
            f"{where}: '{entry}' is a symbolic link (to '{pointed}') that leads out of the "
            f"model; a model must hold its files itself")
    if not allow_links_inside:
        raise UnsafeModelTreeError(
            f"{where}: '{entry}' is a symbolic link (to '{pointed}'); a model must hold its "
            f"files itself ({ALLOW_INTERNAL_LINKS}: true copies a link that stays inside the "
            f"model as a file)")
    try:
        info = os.lstat(target)
    except OSError:
        raise UnsafeModelTreeError(
            f"{where}: '{entry}' is a symbolic link (to '{pointed}') to nothing") from None
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeModelTreeError(
            f"{where}: '{entry}' is a symbolic link (to '{pointed}') to a directory or special "
            f"file; only links to plain files inside the model are copied")
    return target


def check_model_tree(root: str | os.PathLike, where: str, *, allow_hard_links: bool = False,
                     allow_links_inside: bool = False) -> None:
    """Refuse ``root`` (named ``where`` in the message) if any entry under it is not a plain
    file or directory, or a plain file has other hard links; with ``allow_links_inside``, a link
    that stays inside ``root`` (module docstring) is accepted."""
    root = Path(root)
    real_root = os.path.realpath(root)
    hard_links: dict[tuple[int, int], list] = {}  # (dev, inode) -> [links, names seen, entry]
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs) + sorted(files):
            path = Path(directory) / name
            entry = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                _link_target(path, entry, real_root, where, allow_links_inside)
                continue
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                raise UnsafeModelTreeError(
                    f"{where}: '{entry}' is a device, FIFO or socket, not a model file")
            if info.st_nlink > 1 and not allow_hard_links:
                seen = hard_links.setdefault((info.st_dev, info.st_ino),
                                             [info.st_nlink, 0, entry])
                seen[1] += 1
    for links, names, entry in hard_links.values():
        if not allow_links_inside or names < links:
            raise UnsafeModelTreeError(
                f"{where}: '{entry}' is a hard link shared with {links - 1} other "
                f"path(s){'' if names < links else ' inside the model'}; a model must hold "
                f"its files itself")


def copy_model_tree(src: str | os.PathLike, dst: str | os.PathLike, where: str, *,
                    allow_links_inside: bool = False) -> None:
    """Copy the checked tree ``src`` to the new directory ``dst`` without following any link
    the check would refuse (module docstring). Raises :class:`UnsafeModelTreeError` when the
    tree changed under the copy, and the OSError of a failed write (a full disk) as it is."""
    src, dst = Path(src), Path(dst)
    real_root = os.path.realpath(src)
    os.mkdir(dst)
    for directory, dirs, files, dir_fd in os.fwalk(src, follow_symlinks=False):
        relative = Path(directory).relative_to(src)
        for name in sorted(dirs) + sorted(files):
            entry = (relative / name).as_posix()
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            target = dst / relative / name
            if stat.S_ISDIR(info.st_mode):
                os.mkdir(target)
            elif stat.S_ISLNK(info.st_mode):
                linked = _link_target(src / relative / name, entry, real_root, where,
                                      allow_links_inside)
                _copy_file(os.open(linked, os.O_RDONLY | os.O_NOFOLLOW), target, entry, where,
                           allow_links_inside)
            elif stat.S_ISREG(info.st_mode):
                try:
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
                except OSError as exc:
                    raise UnsafeModelTreeError(
                        f"{where}: '{entry}' changed while it was copied ({exc.strerror}); "
                        f"pull again") from None
                _copy_file(fd, target, entry, where, allow_links_inside)
            else:
                raise UnsafeModelTreeError(
                    f"{where}: '{entry}' is a device, FIFO or socket, not a model file")


def _copy_file(fd: int, target: Path, entry: str, where: str, allow_links_inside: bool) -> None:
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(source.fileno())
        if not stat.S_ISREG(info.st_mode) or (info.st_nlink > 1 and not allow_links_inside):
            raise UnsafeModelTreeError(f"{where}: '{entry}' changed while it was copied; "
                                       f"pull again")
        with open(target, "xb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
        os.chmod(target, stat.S_IMODE(info.st_mode))
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
