"""Reading models from S3 (or an S3-compatible store) with boto3: list, download, verify.

Credentials come only from boto3's default chain (``AWS_ACCESS_KEY_ID``... in the environment,
or a role); the config holds the endpoint, region, retry and transfer settings and nothing
secret. The Airflow DAG can pass its own client, built from an Airflow connection, instead.

Every download is checked against what the store says the object is (see
:func:`expected_content`), and every key is mapped to a local path only after checking that it
stays inside the destination: a key is data from the bucket, not a trusted path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Self

from tfopt.components.config.pipeline_config import S3Config
from tfopt.components.storage.digest import file_checksums
from tfopt.optimizer.errors import SourceNotFoundError, TfoptError

log = logging.getLogger(__name__)

PROGRESS_LOG_SECONDS = 5.0
_MD5_ETAG = re.compile(r"[0-9a-f]{32}")


class S3AccessError(TfoptError):
    """The store refused or could not be reached: credentials, permissions, network."""


class UnsafeKeyError(TfoptError):
    """An object key that would be written outside the destination directory."""


class ChecksumMismatchError(TfoptError):
    """Downloaded bytes differ from the checksum the store holds for them.

    Not worth retrying: the store would serve the same bytes again. It means corruption in the
    store or on the way, and needs a person to look.
    """


class ObjectChangedError(TfoptError):
    """An object changed between listing and download; running the pull again picks it up."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    key: str  # an object key, or a prefix (possibly empty: the whole bucket)

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def directory_prefix(self) -> str:
        """The key as a directory: ``models/cnn`` lists ``models/cnn/...``, not ``models/cnn2``."""
        return self.key if not self.key or self.key.endswith("/") else self.key + "/"


def parse_s3_uri(uri: str) -> S3Location:
    if not uri.startswith("s3://"):
        raise TfoptError(f"not an s3:// URI: {uri}")
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket:
        raise TfoptError(f"{uri}: no bucket name (expected s3://bucket/prefix)")
    return S3Location(bucket, key)


@dataclass(frozen=True)
class S3Object:
    key: str
    size: int
    etag: str  # without the quotes

    def identity(self) -> list[Any]:
        return [self.key, self.size, self.etag]


def make_client(settings: S3Config, session=None):
    """An S3 client with the config's endpoint, region, retries and timeouts.

    ``session`` (a ``boto3.session.Session``) defaults to one reading the environment.
    """
    import boto3
    from botocore.config import Config

    session = session or boto3.session.Session()
    options: dict[str, Any] = {}
    if settings.endpoint_url:
        # S3-compatible stores (MinIO, Ceph, moto) are reached by path, not by bucket hostname.
        options["s3"] = {"addressing_style": "path"}
    # total_max_attempts counts the first try, like AWS_MAX_ATTEMPTS; the retries dict's own
    # "max_attempts" would count retries only and make 5 mean 6 requests.
    config = Config(retries={"mode": "standard", "total_max_attempts": settings.max_attempts},
                    connect_timeout=settings.connect_timeout,
                    read_timeout=settings.read_timeout, **options)
    return session.client("s3", endpoint_url=settings.endpoint_url,
                          region_name=settings.region, config=config)


def transfer_config(settings: S3Config):
    from boto3.s3.transfer import TransferConfig

    # "classic" is the s3transfer manager whose subscribers and errors this module relies on;
    # "auto" would switch to the CRT client whenever awscrt happens to be installed.
    # num_download_attempts: how often a download whose body breaks (reset, cut short, read
    # timeout) starts over; botocore's own retries cover a GET that fails before its headers.
    # A read timeout counts in both, so one object takes at most max_attempts**2 GETs.
    return TransferConfig(multipart_threshold=settings.multipart_threshold_mb * 2**20,
                          max_concurrency=settings.max_concurrency,
                          num_download_attempts=settings.max_attempts,
                          preferred_transfer_client="classic")


def endpoint_of(client) -> str:
    return str(client.meta.endpoint_url)


def describe_error(exc: Exception, where: str, bucket: str) -> TfoptError:
    """One line for a boto3/botocore failure while reading ``where``."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return S3AccessError(f"no AWS credentials for {where}: set AWS_ACCESS_KEY_ID and "
                             f"AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment")
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "NoSuchBucket":
            return SourceNotFoundError(f"bucket '{bucket}' does not exist ({where})")
        if code in ("NoSuchKey", "404") or status == 404:
            return SourceNotFoundError(f"no such object: {where}")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                    "InvalidToken"):
            return S3AccessError(f"the store rejected the credentials for {where} ({code})")
        if code in ("AccessDenied", "403", "AllAccessDisabled") or status == 403:
            return S3AccessError(f"access denied to {where} (bucket '{bucket}')")
        message = str(error.get("Message", "")).splitlines()[0] if error.get("Message") else ""
        return S3AccessError(f"{where}: {code or status} {message}".rstrip())
    if isinstance(exc, ConnectionError):
        return S3AccessError(f"cannot reach the store for {where}: {exc}")
    return S3AccessError(f"{where}: {exc}")


def list_objects(client, location: S3Location, page_size: int | None = None
                 ) -> list[S3Object]:
    """Every object under the location's directory prefix, in key order, over all pages."""
    from botocore.exceptions import BotoCoreError, ClientError

    prefix = location.directory_prefix
    where = f"s3://{location.bucket}/{prefix}"
    pagination = {"PageSize": page_size} if page_size else {}
    objects = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=location.bucket, Prefix=prefix, PaginationConfig=pagination):
            for item in page.get("Contents", []):
                objects.append(S3Object(item["Key"], int(item["Size"]),
                                        str(item.get("ETag", "")).strip('"')))
    except (ClientError, BotoCoreError) as exc:
        raise describe_error(exc, where, location.bucket) from None
    if not objects:
        raise SourceNotFoundError(f"no objects under {where} (bucket '{location.bucket}', "
                                  f"prefix '{prefix}')")
    return sorted(objects, key=lambda o: o.key)


def head(client, bucket: str, key: str) -> dict[str, Any]:
    """``head_object`` with the stored checksums (``ChecksumMode=ENABLED``)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except (ClientError, BotoCoreError) as exc:
        raise describe_error(exc, f"s3://{bucket}/{key}", bucket) from None


def stat_object(client, bucket: str, key: str) -> S3Object:
    try:
        response = head(client, bucket, key)
    except SourceNotFoundError:
        # HEAD has no error body: a missing bucket and a missing key both read as "404".
        if not _bucket_exists(client, bucket):
            raise SourceNotFoundError(
                f"bucket '{bucket}' does not exist (s3://{bucket}/{key})") from None
        raise
    return S3Object(key, int(response["ContentLength"]), str(response.get("ETag", "")).strip('"'))


def _bucket_exists(client, bucket: str) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 404
    except BotoCoreError:
        return True  # unknown: the caller's own error stands
    return True


def is_folder_marker(obj: S3Object) -> bool:
    """The empty ``dir/`` objects consoles create to show folders; they hold no data."""
    return obj.key.endswith("/") and obj.size == 0


def relative_path(key: str, prefix: str, bucket: str) -> PurePosixPath:
    """Where ``key`` goes under the destination; refuses keys that would land elsewhere."""
    where = f"s3://{bucket}/{key}"
    if not key.startswith(prefix):
        raise UnsafeKeyError(f"{where} is not under the prefix '{prefix}'")
    rest = key[len(prefix):]
    if not rest:
        raise UnsafeKeyError(f"{where}: the key is the prefix itself; it has no file name")
    if rest.startswith("/"):
        raise UnsafeKeyError(f"{where}: the part after the prefix, '{rest}', is an absolute path")
    parts = rest.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafeKeyError(
            f"{where}: '{rest}' has an empty, '.' or '..' segment and could land outside "
            f"the destination")
    return PurePosixPath(*parts)


def plan_downloads(objects: Iterable[S3Object], prefix: str, bucket: str
                   ) -> list[tuple[S3Object, PurePosixPath]]:
    """(object, relative path) for every object holding data; every key is checked first."""
    plan = []
    for obj in objects:
        if is_folder_marker(obj):
            log.debug("skipping the folder marker s3://%s/%s", bucket, obj.key)
            continue
        plan.append((obj, relative_path(obj.key, prefix, bucket)))
    return plan


def listing_identity(endpoint: str, bucket: str, objects: Iterable[S3Object]) -> str:
    """A hash of where the objects live and what they are: equal iff nothing changed."""
    blob = json.dumps({"endpoint": endpoint, "bucket": bucket,
                       "objects": [o.identity() for o in objects]}, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class ExpectedContent:
    """What a downloaded object must be, and how strongly the store lets us check it."""

    size: int
    sha256_base64: str | None = None
    md5_hex: str | None = None

    @property
    def check(self) -> str:
        return "sha256" if self.sha256_base64 else "md5" if self.md5_hex else "size"


def expected_content(head_response: Mapping[str, Any]) -> ExpectedContent:
    etag = str(head_response.get("ETag", "")).strip('"')
    size = int(head_response["ContentLength"])
    multipart = "-" in etag
    sha256 = head_response.get("ChecksumSHA256")
    full_object_sha = sha256 and "-" not in sha256 and (
        not multipart or head_response.get("ChecksumType") == "FULL_OBJECT")
    if full_object_sha:
        return ExpectedContent(size, sha256_base64=sha256)
    # KMS- and customer-key-encrypted objects have ETags that are not the MD5 of the content.
    encrypted = (head_response.get("ServerSideEncryption") == "aws:kms"
                 or head_response.get("SSECustomerAlgorithm"))
    if not multipart and not encrypted and _MD5_ETAG.fullmatch(etag):
        return ExpectedContent(size, md5_hex=etag)
    # A multipart ETag ("<md5 of the parts' md5s>-<N>") and a composite per-part checksum
    # depend on the part sizes used at upload, which the store does not return: only the
    # size can be compared.
    return ExpectedContent(size)


def verify_file(path: str | Path, expected: ExpectedContent, where: str) -> str:
    """Raise :class:`ChecksumMismatchError` unless ``path`` is the expected content."""
    actual = file_checksums(path)
    if actual.size != expected.size:
        raise ChecksumMismatchError(
            f"{where}: downloaded {actual.size} bytes, the store holds {expected.size}")
    if expected.sha256_base64 and actual.sha256_base64 != expected.sha256_base64:
        raise ChecksumMismatchError(
            f"{where}: SHA-256 of the download is {actual.sha256_base64}, the store holds "
            f"{expected.sha256_base64}")
    if expected.md5_hex and actual.md5_hex != expected.md5_hex:
        raise ChecksumMismatchError(
            f"{where}: MD5 of the download is {actual.md5_hex}, its ETag is {expected.md5_hex}")
    return expected.check


class TransferProgress:
    """Objects and bytes done, logged at info every :data:`PROGRESS_LOG_SECONDS`."""

    def __init__(self, what: str, objects: int, total_bytes: int):
        self.what, self.objects, self.total_bytes = what, objects, total_bytes
        self.objects_done = self.bytes_done = 0
        self._lock = threading.Lock()
        self._last_log = time.monotonic()

    def add_bytes(self, amount: int) -> None:
        with self._lock:
            self.bytes_done += amount  # negative when a retried part starts over
            self._maybe_log()

    def object_done(self) -> None:
        with self._lock:
            self.objects_done += 1
            self._maybe_log()

    def _maybe_log(self) -> None:
        now = time.monotonic()
        if now - self._last_log >= PROGRESS_LOG_SECONDS:
            self._last_log = now
            log.info("%s: %d/%d objects, %.1f/%.1f MiB", self.what, self.objects_done,
                     self.objects, self.bytes_done / 2**20, self.total_bytes / 2**20)


def _subscriber(obj: S3Object, progress: TransferProgress):
    from s3transfer.subscribers import BaseSubscriber

    class Subscriber(BaseSubscriber):
        def on_queued(self, future, **kwargs):
            # Size and ETag from the listing spare a HEAD per object, and the ETag makes
            # ranged (multipart) downloads fail rather than mix two versions of an object.
            future.meta.provide_transfer_size(obj.size)
            future.meta.provide_object_etag(f'"{obj.etag}"')

        def on_progress(self, future, bytes_transferred, **kwargs):
            progress.add_bytes(bytes_transferred)

        def on_done(self, future, **kwargs):
            progress.object_done()

    return Subscriber()


class _GetAttempts:
    """Counts the GET requests sent per key while a download runs, and logs every retry.

    Both botocore and s3transfer retry quietly (at debug level); the task log should show that
    the network is failing, and the final error says how often it did.
    """

    def __init__(self, client, bucket: str, keys: Iterable[str]):
        self.events, self.bucket, self.keys = client.meta.events, bucket, set(keys)
        self.sent: dict[str, int] = {}
        self._lock = threading.Lock()
        self._id = f"tfopt-get-attempts-{id(self)}"

    def __enter__(self) -> Self:
        self.events.register("before-send.s3.GetObject", self, unique_id=self._id)
        return self

    def __exit__(self, *exc) -> None:
        self.events.unregister("before-send.s3.GetObject", unique_id=self._id)

    def __call__(self, request, **_kwargs) -> None:
        from urllib.parse import unquote, urlsplit

        path = unquote(urlsplit(request.url).path)
        matches = [k for k in self.keys if path.endswith("/" + k)]
        if not matches:
            return
        key = max(matches, key=len)  # "p/x" and "p/q/p/x" both end ".../p/x"
        with self._lock:
            self.sent[key] = attempt = self.sent.get(key, 0) + 1
        if attempt > 1:
            log.info("s3://%s/%s: retrying the download (GET %d; the previous one failed)",
                     self.bucket, key, attempt)


def download_objects(client, bucket: str, plan: list[tuple[S3Object, PurePosixPath]],
                     dest: Path, settings: S3Config) -> None:
    """Download each planned object to ``dest / relative path`` and verify it.

    ``dest`` is expected to be a staging directory: on any error its content is partial.
    """
    from boto3.s3.transfer import create_transfer_manager
    from botocore.exceptions import BotoCoreError, ClientError, FlexibleChecksumError
    from s3transfer.exceptions import RetriesExceededError

    dest = Path(dest)
    root = dest.resolve()
    targets = []
    for obj, relative in plan:
        target = dest.joinpath(*relative.parts)
        # Belt and braces after relative_path(): the resolved target must stay under dest.
        if not target.resolve().is_relative_to(root):
            raise UnsafeKeyError(f"s3://{bucket}/{obj.key} would be written outside {dest}")
        target.parent.mkdir(parents=True, exist_ok=True)
        targets.append((obj, target))

    progress = TransferProgress(f"s3://{bucket}", len(targets), sum(o.size for o, _ in targets))
    started = time.monotonic()
    with _GetAttempts(client, bucket, [obj.key for obj, _ in targets]) as attempts, \
            create_transfer_manager(client, transfer_config(settings)) as manager:
        futures = [(obj, target, manager.download(bucket, obj.key, str(target),
                                                  subscribers=[_subscriber(obj, progress)]))
                   for obj, target in targets]
        for obj, target, future in futures:
            where = f"s3://{bucket}/{obj.key}"
            try:
                future.result()
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                    raise ObjectChangedError(
                        f"{where} changed during the download; run the pull again") from None
                raise describe_error(exc, where, bucket) from None
            except FlexibleChecksumError as exc:
                raise ChecksumMismatchError(f"{where}: {exc}") from None
            except RetriesExceededError as exc:
                last = " ".join(str(exc.last_exception).split())
                raise S3AccessError(f"{where}: {attempts.sent.get(obj.key, 0)} download attempts "
                                    f"failed; the last: {last}") from None
            except BotoCoreError as exc:
                raise describe_error(exc, where, bucket) from None
            verify_object(client, bucket, obj, target)
    log.info("downloaded %d objects (%.1f MiB) from s3://%s in %.1fs", len(targets),
             progress.total_bytes / 2**20, bucket, time.monotonic() - started)


def verify_object(client, bucket: str, obj: S3Object, path: Path) -> str:
    """Check a downloaded file against the stored checksums; returns which check applied."""
    where = f"s3://{bucket}/{obj.key}"
    response = head(client, bucket, obj.key)
    etag = str(response.get("ETag", "")).strip('"')
    if etag != obj.etag:
        raise ObjectChangedError(f"{where} changed after it was listed (ETag {obj.etag} -> "
                                 f"{etag}); run the pull again")
    check = verify_file(path, expected_content(response), where)
    log.debug("verified %s (%s)", where, check)
    return check


def download_file(uri: str, dest: str | Path, settings: S3Config, client=None) -> Path:
    """One object (e.g. evaluation data) to ``dest``, verified, and renamed into place."""
    location = parse_s3_uri(uri)
    if not location.key or location.key.endswith("/"):
        raise TfoptError(f"{uri} names a prefix, not one object")
    client = client or make_client(settings)
    obj = stat_object(client, location.bucket, location.key)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    try:
        download_objects(client, location.bucket, [(obj, PurePosixPath(staging.name))],
                         staging.parent, settings)
        os.replace(staging, dest)
    finally:
        staging.unlink(missing_ok=True)
    return dest
