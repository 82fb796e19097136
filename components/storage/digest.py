"""Checksums of one file, in the forms object stores publish (MD5 ETags, base64 SHA-256).

A model directory's digest is :func:`tfopt.optimizer.benchmark.environment.model_digest`, the one
every benchmark result records, so that a pulled model and the same model measured later carry
the same digest.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileChecksums:
    size: int
    md5_hex: str
    sha256_hex: str

    @property
    def sha256_base64(self) -> str:
        """The form S3 returns in ``ChecksumSHA256``."""
        return base64.b64encode(bytes.fromhex(self.sha256_hex)).decode()


def file_checksums(path: str | os.PathLike) -> FileChecksums:
    """MD5 and SHA-256 of one file, read once."""
    md5, sha256, size = hashlib.md5(usedforsecurity=False), hashlib.sha256(), 0
    with open(Path(path), "rb") as f:
        while chunk := f.read(_CHUNK):
            md5.update(chunk)
            sha256.update(chunk)
            size += len(chunk)
    return FileChecksums(size=size, md5_hex=md5.hexdigest(), sha256_hex=sha256.hexdigest())
