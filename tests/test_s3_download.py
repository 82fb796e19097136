"""tfopt.components.storage.s3 against a real moto server over HTTP: list, map keys, download, verify."""

import base64
import hashlib
import logging
import os
from pathlib import PurePosixPath

import pytest
from s3_server import WrongChecksumClient, moto_endpoint_fixture, s3_fixture  # noqa: F401

from tfopt.components.config.pipeline_config import S3Config
from tfopt.components.storage import s3 as storage
from tfopt.components.storage.s3 import (
    ChecksumMismatchError,
    ExpectedContent,
    ObjectChangedError,
    S3AccessError,
    UnsafeKeyError,
    download_objects,
    expected_content,
    list_objects,
    make_client,
    parse_s3_uri,
    plan_downloads,
    relative_path,
    verify_file,
    verify_object,
)
from tfopt.optimizer.errors import SourceNotFoundError

MiB = 2**20


def _settings(endpoint: str, **overrides) -> S3Config:
    return S3Config(endpoint_url=endpoint, region="us-east-1", **overrides)


def _sha256_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_the_client_takes_endpoint_region_retries_and_timeouts_from_the_config(s3):
    settings = _settings(s3.endpoint_url, max_attempts=7, connect_timeout=3, read_timeout=9,
                         multipart_threshold_mb=16, max_concurrency=2)
    client = make_client(settings)

    assert client.meta.endpoint_url == s3.endpoint_url
    assert client.meta.region_name == "us-east-1"
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 7}
    assert (client.meta.config.connect_timeout, client.meta.config.read_timeout) == (3, 9)
    transfer = storage.transfer_config(settings)
    assert (transfer.multipart_threshold, transfer.max_request_concurrency) == (16 * MiB, 2)


def test_credentials_come_from_the_environment_only(s3, monkeypatch):
    s3.put("m/a", b"a")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    client = make_client(_settings(s3.endpoint_url))
    with pytest.raises(S3AccessError, match="no AWS credentials.*AWS_ACCESS_KEY_ID"):
        list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/m"))


def test_a_prefix_lists_as_a_directory_over_every_page(s3):
    for key in ["m/a", "m/b/c", "m/d", "m/e", "m/f", "m2/not-mine", "other"]:
        s3.put(key, key.encode())
    client = make_client(_settings(s3.endpoint_url))

    objects = list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/m"), page_size=2)

    assert [o.key for o in objects] == ["m/a", "m/b/c", "m/d", "m/e", "m/f"]
    assert objects[0].size == 3 and objects[0].etag == hashlib.md5(b"m/a").hexdigest()


def test_a_missing_bucket_is_a_one_line_source_error(s3):
    client = make_client(_settings(s3.endpoint_url))
    with pytest.raises(SourceNotFoundError, match="bucket 'no-such-bucket-x' does not exist"):
        list_objects(client, parse_s3_uri("s3://no-such-bucket-x/models/cnn"))


def test_an_empty_prefix_names_the_bucket_and_the_prefix(s3):
    s3.put("models/other/a", b"a")
    client = make_client(_settings(s3.endpoint_url))
    with pytest.raises(SourceNotFoundError) as caught:
        list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/models/cnn"))
    assert f"bucket '{s3.bucket}'" in str(caught.value)
    assert "prefix 'models/cnn/'" in str(caught.value)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("key, reason", [
    ("p/../evil.txt", "'..' segment"),
    ("p/a/../../evil.txt", "'..' segment"),
    ("p//etc/passwd", "absolute path"),
    ("p/./a", "'.'"),
    ("p/a//b", "empty"),
    ("p/", "the prefix itself"),
])
def test_keys_that_could_land_outside_the_destination_are_refused(key, reason):
    with pytest.raises(UnsafeKeyError, match=reason) as caught:
        relative_path(key, "p/", "bucket")
    assert key in str(caught.value)


def test_a_listed_key_with_dotdot_is_refused_before_anything_is_written(s3, tmp_path):
    s3.put("p/saved_model.pb", b"pb")
    s3.put("p/../evil.txt", b"evil")
    client = make_client(_settings(s3.endpoint_url))
    objects = list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/p"))
    assert "p/../evil.txt" in [o.key for o in objects]  # the store really holds such a key

    with pytest.raises(UnsafeKeyError, match=r"p/\.\./evil\.txt"):
        plan_downloads(objects, "p/", s3.bucket)


def test_download_refuses_a_path_that_resolves_outside_the_destination(s3, tmp_path):
    s3.put("p/x", b"x")
    client = make_client(_settings(s3.endpoint_url))
    (obj,) = list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/p"))
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafeKeyError, match="outside"):
        download_objects(client, s3.bucket, [(obj, PurePosixPath("../escaped"))], dest,
                         _settings(s3.endpoint_url))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest"]
    assert list(dest.iterdir()) == []


def test_folder_markers_are_skipped(s3):
    s3.put("p/", b"")
    s3.put("p/variables/", b"")
    s3.put("p/variables/variables.index", b"i")
    client = make_client(_settings(s3.endpoint_url))
    plan = plan_downloads(list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/p")), "p/",
                          s3.bucket)
    assert [(o.key, str(rel)) for o, rel in plan] == [
        ("p/variables/variables.index", "variables/variables.index")]


def test_each_download_is_verified_by_the_strongest_checksum_the_store_has(s3, tmp_path):
    small = b"small object" * 100
    big = os.urandom(6 * MiB)  # two 5 MiB-threshold parts: a multipart "<md5>-2" ETag
    s3.put("p/with_sha256", small, ChecksumAlgorithm="SHA256")
    s3.put("p/plain", small)
    (tmp_path / "big").write_bytes(big)
    from boto3.s3.transfer import TransferConfig

    s3.client.upload_file(str(tmp_path / "big"), s3.bucket, "p/multipart",
                          Config=TransferConfig(multipart_threshold=5 * MiB,
                                                multipart_chunksize=5 * MiB))
    settings = _settings(s3.endpoint_url, multipart_threshold_mb=5)
    client = make_client(settings)
    objects = list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/p"))
    dest = tmp_path / "dest"

    download_objects(client, s3.bucket, plan_downloads(objects, "p/", s3.bucket), dest, settings)

    assert (dest / "multipart").read_bytes() == big
    assert (dest / "plain").read_bytes() == small
    checks = {o.key: verify_object(client, s3.bucket, o, dest / o.key[2:]) for o in objects}
    assert checks == {"p/multipart": "size", "p/plain": "md5", "p/with_sha256": "sha256"}


def test_a_sha256_mismatch_is_a_non_retryable_error_naming_the_key(s3, tmp_path):
    s3.put("p/saved_model.pb", b"pb bytes", ChecksumAlgorithm="SHA256")
    client = WrongChecksumClient(make_client(_settings(s3.endpoint_url)), "p/saved_model.pb")
    objects = list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/p"))

    with pytest.raises(ChecksumMismatchError, match=r"p/saved_model\.pb: SHA-256"):
        download_objects(client, s3.bucket, plan_downloads(objects, "p/", s3.bucket),
                         tmp_path / "dest", _settings(s3.endpoint_url))


@pytest.mark.parametrize("expected, check", [
    (lambda data: ExpectedContent(len(data) + 1), "downloaded"),
    (lambda data: ExpectedContent(len(data), md5_hex=hashlib.md5(b"other").hexdigest()), "MD5"),
    (lambda data: ExpectedContent(len(data), sha256_base64=_sha256_b64(b"other")), "SHA-256"),
], ids=["size", "md5", "sha256"])
def test_verify_file_rejects_a_download_that_differs_from_the_store(s3, tmp_path, expected,
                                                                     check):
    data = b"downloaded bytes"
    s3.put("k", data)
    target = tmp_path / "k"
    s3.client.download_file(s3.bucket, "k", str(target))

    with pytest.raises(ChecksumMismatchError, match=check):
        verify_file(target, expected(data), f"s3://{s3.bucket}/k")
    assert verify_file(target, ExpectedContent(len(data), md5_hex=hashlib.md5(data).hexdigest(),
                                               sha256_base64=_sha256_b64(data)), "k") == "sha256"


@pytest.mark.parametrize("head, check", [
    ({"ETag": '"' + "a" * 32 + '"', "ContentLength": 1}, "md5"),
    ({"ETag": '"' + "a" * 32 + '-3"', "ContentLength": 1}, "size"),
    ({"ETag": '"' + "a" * 32 + '"', "ContentLength": 1, "ServerSideEncryption": "aws:kms"},
     "size"),
    ({"ETag": '"' + "a" * 32 + '"', "ContentLength": 1, "ChecksumSHA256": "c2hh"}, "sha256"),
    ({"ETag": '"' + "a" * 32 + '-3"', "ContentLength": 1, "ChecksumSHA256": "c2hh-3"}, "size"),
    ({"ETag": '"' + "a" * 32 + '-3"', "ContentLength": 1, "ChecksumSHA256": "c2hh",
      "ChecksumType": "FULL_OBJECT"}, "sha256"),
], ids=["md5-etag", "multipart-etag", "kms-etag", "sha256", "composite-sha256",
        "full-object-sha256"])
def test_the_check_used_follows_what_the_store_reports(head, check):
    assert expected_content(head).check == check


def test_an_object_overwritten_after_listing_is_reported_as_changed(s3, tmp_path):
    s3.put("p/a", b"version 1")
    client = make_client(_settings(s3.endpoint_url))
    objects = list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/p"))
    s3.put("p/a", b"version 2, longer")

    with pytest.raises(ObjectChangedError, match="run the pull again"):
        download_objects(client, s3.bucket, plan_downloads(objects, "p/", s3.bucket),
                         tmp_path / "dest", _settings(s3.endpoint_url))


def test_progress_is_logged_while_downloading(s3, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(storage, "PROGRESS_LOG_SECONDS", 0.0)
    for i in range(3):
        s3.put(f"p/{i}", b"x" * 1000)
    client = make_client(_settings(s3.endpoint_url))
    objects = list_objects(client, parse_s3_uri(f"s3://{s3.bucket}/p"))

    with caplog.at_level(logging.INFO, logger="tfopt.components.storage.s3"):
        download_objects(client, s3.bucket, plan_downloads(objects, "p/", s3.bucket),
                         tmp_path / "dest", _settings(s3.endpoint_url))

    progress = [r.getMessage() for r in caplog.records if "objects," in r.getMessage()]
    assert progress and progress[-1].endswith("MiB")
    assert any("3/3 objects" in m for m in progress)


@pytest.mark.parametrize("code, status, error, says", [
    ("AccessDenied", 403, S3AccessError, "access denied to s3://b/models/cnn/ (bucket 'b')"),
    ("InvalidAccessKeyId", 403, S3AccessError, "rejected the credentials"),
    ("NoSuchBucket", 404, SourceNotFoundError, "bucket 'b' does not exist"),
    ("SlowDown", 503, S3AccessError, "s3://b/models/cnn/: SlowDown"),
])
def test_store_errors_become_one_line_errors_naming_bucket_and_prefix(code, status, error, says):
    # moto does not enforce IAM, so a refusal is built as botocore would raise it.
    from botocore.exceptions import ClientError

    exc = ClientError({"Error": {"Code": code, "Message": "refused\nsecond line"},
                       "ResponseMetadata": {"HTTPStatusCode": status}}, "ListObjectsV2")
    described = storage.describe_error(exc, "s3://b/models/cnn/", "b")
    assert isinstance(described, error)
    assert says in str(described) and "\n" not in str(described)


def test_an_unreachable_endpoint_is_a_one_line_access_error(s3):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    client = make_client(S3Config(endpoint_url=closed, max_attempts=1, connect_timeout=1))
    with pytest.raises(S3AccessError, match="cannot reach the store") as caught:
        list_objects(client, parse_s3_uri("s3://bucket/models/cnn"))
    assert "\n" not in str(caught.value)


def test_a_single_object_downloads_verified_and_whole(s3, tmp_path):
    s3.put("eval/digits.npz", b"x" * 1000)
    target = storage.download_file(f"s3://{s3.bucket}/eval/digits.npz", tmp_path / "d.npz",
                                   _settings(s3.endpoint_url))
    assert target.read_bytes() == b"x" * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz"]


def test_a_missing_single_object_leaves_nothing(s3, tmp_path):
    with pytest.raises(SourceNotFoundError):
        storage.download_file(f"s3://{s3.bucket}/eval/missing.npz", tmp_path / "d.npz",
                              _settings(s3.endpoint_url))
    assert list(tmp_path.iterdir()) == []
