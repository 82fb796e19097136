"""Representative inputs for int8 calibration, and where they came from.

Calibration fits activation ranges; it needs inputs, not labels. Every int8 candidate, whatever
its runtime, takes the same :class:`Calibration`: one-row feed dicts and a ``source`` saying
what they are, so that a candidate calibrated on made-up inputs is never mistaken for one
calibrated on real data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from optimizer.errors import InvalidInputsError
from optimizer.signature import SignatureInfo

SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class Calibration:
    feeds: tuple[dict[str, np.ndarray], ...]  # one row each, keyed like the signature
    source: str  # "eval data <path>", "calibration data <path>", or SYNTHETIC

    @property
    def synthetic(self) -> bool:
        return self.source == SYNTHETIC

    @property
    def tag(self) -> str:
        """What candidates and the report say: ``synthetic`` or ``data``."""
        return SYNTHETIC if self.synthetic else "data"


def from_rows(signature: SignatureInfo, x: np.ndarray, samples: int, source: str,
              seed: int = 0) -> Calibration:
    """A seeded draw of ``samples`` rows of ``x`` for a single-input signature: calibration
    only fits activation ranges, and a draw (not the first rows) spreads it over the classes of
    a sorted file."""
    from optimizer.litert.convert import calibration_feeds

    rows = np.random.default_rng(seed).permutation(len(x))[:samples]
    return Calibration(tuple(calibration_feeds(signature, np.asarray(x)[rows], samples)), source)


def checked_feeds(signature: SignatureInfo, feeds: Iterable[Mapping[str, np.ndarray]],
                  limit: int, needed_by: str) -> list[dict[str, np.ndarray]]:
    """The first ``limit`` feed dicts, each holding every input of ``signature`` in its dtype;
    ``needed_by`` (the flavour that calibrates) names who asked when there are none."""
    checked = []
    for feed in feeds:
        if len(checked) >= limit:
            break
        missing = [k for k in signature.input_keys if k not in feed]
        if missing:
            raise InvalidInputsError(f"calibration sample {len(checked)} lacks input(s) "
                                     f"{', '.join(missing)} of signature '{signature.name}'")
        checked.append({s.key: np.asarray(feed[s.key]).astype(s.numpy_dtype, copy=False)
                        for s in signature.inputs})
    if not checked:
        raise InvalidInputsError(f"{needed_by} needs calibration data: the representative "
                                 "dataset is empty")
    return checked
