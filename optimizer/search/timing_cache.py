"""A per-machine JSON file of timings by key, shared by the cost models that time parts of a
model once and reuse them: the op cost model (:class:`tfopt.optimizer.search.cost.OpCostModel`) and
the precision search's layer costs (:mod:`tfopt.optimizer.search.precision.onnx_runtime`).

A file made on another machine (its fingerprint differs) or by another version of the keys is
not reused: timings are only comparable on the CPU, thread count and runtime that took them.
Written atomically (a temp file renamed over it), merged with what another process may have
written meanwhile.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


class TimingCache:
    def __init__(self, path: str | os.PathLike, version: int, machine: str, what: str):
        self.path, self.version, self.machine, self.what = Path(path), version, machine, what

    def load(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s cache %s: %s", self.what, self.path, exc)
            return {}
        if data.get("version") != self.version or data.get("machine") != self.machine:
            log.info("%s cache %s was made on another machine or version; not reused",
                     self.what, self.path)
            return {}
        return {str(k): float(v) for k, v in data.get("seconds", {}).items()}

    def save(self, seconds: dict[str, float]) -> dict[str, float]:
        """Write ``seconds`` merged over what the file holds (entries given here win); the
        merged timings."""
        merged = {**self.load(), **seconds}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, staging = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w") as out:
                json.dump({"version": self.version, "machine": self.machine,
                           "seconds": dict(sorted(merged.items()))}, out, indent=0)
            os.replace(staging, self.path)
        except BaseException:
            Path(staging).unlink(missing_ok=True)
            raise
        return merged
