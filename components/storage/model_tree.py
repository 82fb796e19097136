"""What a model directory may hold: plain files and directories, nothing that points elsewhere.

A model is copied, uploaded and served as a tree of files. A symbolic link inside it would carry
whatever it points at (a host file, another model) along with it; a hard link shares its content
with a file outside the tree; a device or FIFO is no model file at all. Archives are held to the
same rule member by member (:mod:`components.storage.archive`); a downloaded registry version
and a local source directory are held to it here, before anything reads them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from optimizer.errors import TfoptError


class UnsafeModelTreeError(TfoptError):
    """A model directory holds a link or a special file."""


def check_model_tree(root: str | os.PathLike, where: str, *,
                     allow_hard_links: bool = False) -> None:
    """Refuse ``root`` (named ``where`` in the message) if any entry under it is not a plain
    file or directory, or a plain file has other hard links."""
    root = Path(root)
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs) + sorted(files):
            path = Path(directory) / name
            entry = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                raise UnsafeModelTreeError(
                    f"{where}: '{entry}' is a symbolic link (to '{os.readlink(path)}'); a model "
                    f"must hold its files itself")
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                raise UnsafeModelTreeError(
                    f"{where}: '{entry}' is a device, FIFO or socket, not a model file")
            if info.st_nlink > 1 and not allow_hard_links:
                raise UnsafeModelTreeError(
                    f"{where}: '{entry}' is a hard link shared with {info.st_nlink - 1} other "
                    f"path(s); a model must hold its files itself")
