"""MLflow for the pipeline: a client that fails fast, and its failures as one line.

Left to its defaults, MLflow's HTTP client retries a failed request 7 times with exponential
backoff and waits up to 120 s for each answer, so an Airflow task would learn that the tracking
server is down only minutes later. Pipeline calls run with 2 retries, a backoff factor of 1 and
a 30 s timeout instead: a server that refuses connections fails the step in a few seconds, one
that accepts them and never answers in about 95 s (3 tries of 30 s; the timeout bounds the wait
for each answer, not the length of an upload, so large models still upload).
``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``..._BACKOFF_FACTOR`` and ``..._TIMEOUT`` set in the
environment win over these. MLflow's
"View run at" line on stdout is suppressed too: ``tfopt step`` prints its output JSON there; so
are its artifact progress bars on stderr.

Credentials never come from the config: MLflow reads ``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD`` (or ``MLFLOW_TRACKING_TOKEN``) from the environment itself.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tfopt.optimizer.errors import TfoptError

if TYPE_CHECKING:
    from mlflow import MlflowClient

PIPELINE_MLFLOW_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    # Its bars are carriage-return lines on stderr, noise in a task log and around the one line
    # a failing command prints; the pipeline logs each download and upload instead.
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}

_UNREACHABLE = ("Max retries exceeded", "Connection refused", "Failed to establish",
                "timed out", "Name or service not known", "Connection aborted")


class TrackingError(TfoptError):
    """The MLflow tracking server or model registry is unreachable or refused a request."""


def describe_mlflow_error(exc: BaseException, tracking_uri: str) -> str:
    text = " ".join(str(exc).split())
    if any(marker in text for marker in _UNREACHABLE):
        cause = re.search(r"\[Errno -?\d+\] ([^\"'()]+)", text)
        reason = cause.group(1).strip() if cause else (
            "no answer in time" if "timed out" in text else "no connection")
        return f"MLflow at {tracking_uri} is unreachable: {reason}"
    return f"MLflow at {tracking_uri}: {text[:400]}"


@contextlib.contextmanager
def pipeline_mlflow_env() -> Iterator[None]:
    """:data:`PIPELINE_MLFLOW_ENV` for the duration, except what the environment already sets."""
    added = {key: value for key, value in PIPELINE_MLFLOW_ENV.items() if key not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


@contextlib.contextmanager
def mlflow_client(tracking_uri: str) -> Iterator[MlflowClient]:
    """A client for ``tracking_uri`` (also its registry); MLflow failures in the block become
    one :class:`TrackingError` line."""
    import requests
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    with pipeline_mlflow_env():
        try:
            yield MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
        except (MlflowException, requests.RequestException) as exc:
            raise TrackingError(describe_mlflow_error(exc, tracking_uri)) from None


def local_artifact_location(tracking_uri: str) -> str | None:
    """For a sqlite store, ``artifacts/`` beside its database file; None for other stores.

    MLflow would give a new experiment in a sqlite store ``./mlruns``, relative to whatever
    directory the process runs in; a server or a file store decides for itself.
    """
    if not tracking_uri.startswith("sqlite:///"):
        return None
    database = Path(tracking_uri[len("sqlite:///"):])
    return (database.absolute().parent / "artifacts").as_uri()


def is_missing(exc: BaseException) -> bool:
    """Whether an MLflow error says the thing asked for does not exist."""
    return getattr(exc, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"
