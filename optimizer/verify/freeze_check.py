"""Freeze one signature and check the frozen graph against its source: what ``tfopt freeze``
and the pipeline's ``freeze`` step both do before writing anything.

Freezing is not supposed to change a single output, so the frozen graph is run beside the
SavedModel on inputs generated from the signature (:func:`~tfopt.optimizer.verify.equivalence.compare`)
and held to the :class:`~tfopt.optimizer.verify.tolerance.Tolerance` (its ``atol`` by default, the
same bound every rewrite is held to). A source whose own outputs are NaN or Inf on those inputs
is refused first: agreement with it would mean nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from tfopt.optimizer.errors import EquivalenceError
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import DEFAULT_SIGNATURE
from tfopt.optimizer.verify.equivalence import EquivalenceReport
from tfopt.optimizer.verify.tolerance import Tolerance


@dataclass(frozen=True)
class CheckedFreeze:
    """A frozen signature whose outputs agree with its source's within ``tolerance``."""

    frozen: FrozenModel
    report: EquivalenceReport
    tolerance: Tolerance


def freeze_and_check(
    path: str | os.PathLike,
    signature: str = DEFAULT_SIGNATURE,
    tolerance: Tolerance | None = None,
    *,
    policy: ScanPolicy = DEFAULT_POLICY,
    name: str | None = None,
    around: Callable[[str], AbstractContextManager] | None = None,
    on_report: Callable[[EquivalenceReport], None] | None = None,
) -> CheckedFreeze:
    """Freeze ``signature`` of the SavedModel at ``path`` and check it against ``path``.

    ``name`` is how errors call the source (a URI, default ``path``); ``around(stage)`` is
    entered around each of the two stages, ``"freeze"`` and ``"check"`` (a CLI's stage lines);
    ``on_report`` sees the equivalence report before it is judged (a CLI prints it).
    Raises :class:`~tfopt.optimizer.errors.InvalidInputsError` when the source's own outputs are
    not finite, :class:`~tfopt.optimizer.errors.EquivalenceError` when the frozen graph's outputs
    break the tolerance.
    """
    from tfopt.optimizer.model.freeze import freeze
    from tfopt.optimizer.verify.equivalence import compare
    from tfopt.optimizer.verify.finite import refuse_nonfinite_source

    tolerance = tolerance or Tolerance()
    around = around or (lambda stage: nullcontext())
    name = name or str(path)
    with around("freeze"):
        frozen = freeze(path, signature, policy=policy)
    with around("check"):
        report = compare(path, frozen, signature_name=signature, policy=policy)
    if on_report is not None:
        on_report(report)
    refuse_nonfinite_source(report.original_nan_values, report.original_inf_values, name,
                            "inputs generated from its signature")
    if not report.accepted_by(tolerance):
        raise EquivalenceError(f"frozen outputs differ from {name}: "
                               f"{'; '.join(report.violations(tolerance))}; nothing written")
    return CheckedFreeze(frozen=frozen, report=report, tolerance=tolerance)
