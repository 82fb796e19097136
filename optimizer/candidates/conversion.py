"""What converting a SavedModel to another runtime's format takes, whatever the runtime.

The ONNX and OpenVINO converters (:mod:`tfopt.optimizer.candidates.onnx.convert`,
:mod:`tfopt.optimizer.candidates.openvino.convert`) share the routine: check the destination before any work,
check the calibration inputs of a flavour that calibrates, run the converter with its output
captured (:func:`converter_output`: file descriptor 2, Python warnings and the converter's own
loggers, all logged at DEBUG and kept for the error message), check that the converted model
presents the SavedModel's signature (:func:`check_contract`), and put the files in place, the
sidecar last (:func:`install_files`), so that a model without its sidecar is never left behind.

A converter that cannot produce a flavour raises :class:`ConversionError` with one line saying
why; :func:`tfopt.optimizer.candidates.build.derive_candidates` lists the candidate as skipped with it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from tfopt.optimizer.errors import DestinationError, InvalidInputsError, TfoptError, first_line
from tfopt.optimizer.files.atomic import check_file_writable
from tfopt.optimizer.inputs.calibration import Calibration, checked_feeds
from tfopt.optimizer.model.op_scan import ScanPolicy
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.model.sidecar import Sidecar, sidecar_path, write_sidecar
from tfopt.optimizer.model.signature import SignatureInfo, contract_difference
from tfopt.optimizer.system.native_output import captured_native_output

log = logging.getLogger(__name__)
T = TypeVar("T")


class ConversionError(TfoptError):
    """A converter could not turn this model into this flavour (a stated reason, one line);
    ``details`` keeps the converter's whole output."""

    exit_code = 4  # like TransformFailed: valid input, but this candidate cannot be produced

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


@dataclass
class CapturedOutput:
    """What a converter said while it ran: fd 2, warnings, and its loggers' records."""

    chunks: list[str] = field(default_factory=list)
    records: list[logging.LogRecord] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.chunks) + "".join(f"{r.levelname}:{r.name}:{r.getMessage()}\n"
                                              for r in self.records)


class _Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]):
        super().__init__(logging.DEBUG)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def converter_output(what: str, loggers: Sequence[str] = ()) -> Iterator[CapturedOutput]:
    """Capture a converter's output for the block (fd 2, Python's stdout, warnings); logged at
    DEBUG afterwards as ``what``. The named ``loggers`` are collected and kept from reaching the
    application's handlers."""
    captured = CapturedOutput()
    handler = _Collect(captured.records)
    saved = []
    for name in loggers:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate, logger.handlers[:]))
        logger.handlers, logger.propagate = [handler], False
    native: list[str] = []
    printed = io.StringIO()  # NNCF draws progress bars on sys.stdout
    try:
        with captured_native_output() as native, warnings.catch_warnings(record=True) as warned, \
                contextlib.redirect_stdout(printed):
            warnings.simplefilter("always")
            try:
                yield captured
            finally:
                captured.chunks.extend(f"{w.category.__name__}: {w.message}\n" for w in warned)
    finally:
        captured.chunks[:0] = [*native, printed.getvalue()]  # filled when the capture ended
        for logger, propagate, handlers in saved:
            logger.handlers, logger.propagate = handlers, propagate
        if captured.text:
            log.debug("%s output:\n%s", what, captured.text)


def run_converter(convert: Callable[[], T], failure: str, what: str,
                  loggers: Sequence[str] = (), condense: Callable[[str], str] | None = None,
                  refused: Callable[[CapturedOutput], str | None] | None = None) -> T:
    """``convert()`` with its output captured (:func:`converter_output`). Anything it raises but
    a :class:`TfoptError` becomes a :class:`ConversionError` ``"{failure}: {reason}"``, the
    reason being ``condense(message)`` (default: its first line); ``refused(captured)`` may
    name a reason to refuse a model the converter returned anyway (tf2onnx keeps going past ops
    it cannot convert)."""
    with converter_output(what, loggers) as captured:
        try:
            result, problem = convert(), None
        except TfoptError:
            raise
        except Exception as exc:  # noqa: BLE001 - converters raise many types; all mean "cannot"
            result, problem = None, exc
    if refused is not None and (reason := refused(captured)):
        raise ConversionError(f"{failure}: {reason}", details=captured.text)
    if problem is not None:
        reason = condense(str(problem)) if condense is not None else first_line(problem)
        raise ConversionError(f"{failure}: {reason}",
                              details=f"{problem}\n{captured.text}") from problem
    return result


class SharedConversion:
    """One SavedModel signature converted once and shared by every flavour built from it (a
    failure too: each flavour is refused for the same reason without converting again).
    Subclasses write :meth:`_convert`."""

    def __init__(self, saved_model: str | os.PathLike, signature: str):
        self.saved_model = Path(saved_model)
        self.signature = signature
        self._result = None
        self._failure: ConversionError | None = None

    def result(self):
        if self._failure is not None:
            raise self._failure
        if self._result is None:
            try:
                self._result = self._convert()
            except ConversionError as exc:
                self._failure = exc
                raise
        return self._result

    def _convert(self):
        raise NotImplementedError

    def check_source(self, saved_model: Path, signature: str) -> None:
        if (self.saved_model, self.signature) != (saved_model, signature):
            raise InvalidInputsError(f"the conversion given is of {self.saved_model} "
                                     f"'{self.signature}', not {saved_model} '{signature}'")


@dataclass(frozen=True)
class Request:
    """A flavour to build, checked before any work: where it goes, the contract it must keep,
    and its calibration feeds (None for a flavour that does not calibrate)."""

    saved_model: Path
    dst: Path
    files: tuple[Path, ...]  # dst and its companions
    contract: SignatureInfo
    feeds: list[dict[str, np.ndarray]] | None


def prepare(saved_model: str | os.PathLike, dst: str | os.PathLike, flavour: str, *,
            kind: str, flavours: Sequence[str], calibrating: Sequence[str], suffix: str,
            companions: Sequence[str], signature: str, calibration: Calibration | None,
            samples: int, overwrite: bool, packages: Sequence[str], extra: str,
            policy: ScanPolicy) -> Request:
    """Check a conversion request: the flavour, the destination's name and writability, the
    packages, the source and its signature, and a calibrating flavour's inputs."""
    if flavour not in flavours:
        raise InvalidInputsError(f"unknown {kind} flavour '{flavour}'; one of "
                                 f"{', '.join(flavours)}")
    dst = Path(dst).absolute()
    if dst.suffix != suffix:
        raise DestinationError(f"{dst}: the file name of a {kind} model must end in {suffix}")
    files = (dst, *(dst.with_suffix(s) for s in companions))
    check_destination(files, overwrite)
    require(packages, extra, f"converting to {kind} {flavour}")
    saved_model = Path(saved_model)
    contract = get_signature(saved_model, signature, policy=policy)  # typed errors, the scan
    feeds = (calibration_inputs(contract, calibration, samples, flavour)
             if flavour in calibrating else None)
    return Request(saved_model, dst, files, contract, feeds)


def require(modules: Sequence[str], extra: str, what: str) -> None:
    """Refuse, naming the extra to install, when a converter's packages are missing."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            raise ConversionError(f"{what} needs the {module} package, which is not installed "
                                  f"(pip install 'tfopt[{extra}]')") from None


def check_destination(files: Sequence[Path], overwrite: bool) -> None:
    """Fail before any work when the model's files or its sidecar could not be written."""
    for path in (*files, sidecar_path(files[0])):
        check_file_writable(path, overwrite)


def calibration_inputs(contract: SignatureInfo, calibration: Calibration | None, samples: int,
                       flavour: str) -> list[dict[str, np.ndarray]]:
    """The calibration feeds a calibrating ``flavour`` uses, checked against the signature."""
    if calibration is None:
        raise InvalidInputsError(f"{flavour} needs calibration data: pass representative "
                                 f"inputs (evaluation.data)")
    return checked_feeds(contract, calibration.feeds, samples, flavour)


def check_contract(contract: SignatureInfo, converted: SignatureInfo, failure: str) -> None:
    """Refuse a converted model that does not present the SavedModel's signature."""
    if problem := contract_difference(contract, converted):
        raise ConversionError(f"{failure}: the converted signature differs from the "
                              f"SavedModel's: {problem}")


def install_files(staged: Sequence[tuple[Path, Path]], sidecar: Sidecar,
                  overwrite: bool) -> Path:
    """Move each staged file to its destination (same filesystem: one rename each), then write
    the sidecar; on any failure the destinations written so far are removed. The sidecar's
    ``files`` are the destinations."""
    placed: list[Path] = []
    try:
        for source, dst in staged:
            check_file_writable(dst, overwrite)
            os.replace(source, dst)
            placed.append(dst)
        return write_sidecar(sidecar, overwrite)
    except BaseException:
        for dst in placed:
            dst.unlink(missing_ok=True)  # a model without its sidecar is not a finished output
        raise


def calibration_record(feeds: list | None, calibration: Calibration | None) -> dict | None:
    """What the sidecar says about the calibration data, if the flavour used any."""
    if feeds is None or calibration is None:
        return None
    return {"samples": len(feeds), "source": calibration.source}


def staging_directory(dst: Path):
    """A hidden working directory beside ``dst`` (so that the final renames stay on one
    filesystem), removed with everything in it when the block ends."""
    import tempfile

    dst.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=f".{dst.name}.work-", dir=dst.parent)
