"""The digest of what the image installs from this checkout: `make image` labels the image with
it (``tfopt.sources``), and the pod tests run only on an image whose label is this checkout's,
since an image built from other sources would test other code.

Standard library only: the build script runs it with the host's Python.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LABEL = "tfopt.sources"
# What the Dockerfile copies and installs; the README it copies too is left out, since a change
# to the docs changes nothing the image runs.
SOURCES = ("tfopt", "optimizer", "components", "dags", "pyproject.toml", "requirements-image.lock",
           "Dockerfile")


def sources_digest(repo: Path = REPO) -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        root = repo / name
        files = [root] if root.is_file() else sorted(
            path for path in root.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc")
        for path in files:
            digest.update(path.relative_to(repo).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


if __name__ == "__main__":
    print(sources_digest())
