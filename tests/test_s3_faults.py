"""pull from S3 through a real network that fails: resets, bodies cut short, timeouts, bit flips.

The pipeline's client is pointed (``s3.endpoint_url``) at tests/fault_proxy.py, which sits in
front of the real moto server and breaks chosen requests on the TCP connection itself, below
botocore. Attempts are counted at the proxy, so "retried up to the limit" is what crossed the
wire, not what the client says it did.
"""

import logging
import os
from pathlib import Path

import pytest
from cli_testing import error_lines
from fault_proxy import FaultProxy
from s3_server import moto_endpoint_fixture, s3_fixture  # noqa: F401

from tfopt.components.cli import main
from tfopt.components.config.pipeline_config import S3Config, config_from_mapping
from tfopt.components.steps.pull import pull
from tfopt.components.storage import s3 as storage
from tfopt.components.storage.s3 import ChecksumMismatchError, S3AccessError
from tfopt.optimizer.benchmark.environment import model_digest

PREFIX = "models/cnn"
ATTEMPTS = 3
PB = rf"/{PREFIX}/saved_model\.pb$"  # the GET of one object, matched in the request path
MiB = 2**20


@pytest.fixture
def proxy(moto_endpoint):
    with FaultProxy(moto_endpoint) as running:
        yield running


@pytest.fixture(scope="module")
def cnn(model_dir):
    return model_dir("keras_cnn")


@pytest.fixture
def source(s3, cnn):
    s3.upload_directory(cnn, PREFIX, ChecksumAlgorithm="SHA256")
    return f"s3://{s3.bucket}/{PREFIX}"


def _config(source, workdir, proxy, **s3_settings):
    settings = {"endpoint_url": proxy.url, "region": "us-east-1", "max_attempts": ATTEMPTS,
                "connect_timeout": 2, "read_timeout": 2, **s3_settings}
    return config_from_mapping({"source": source, "workdir": str(workdir), "s3": settings})


def _files(root) -> dict[str, bytes]:
    root = Path(root)
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _retries_logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retrying the download" in r.getMessage()]


@pytest.mark.parametrize("method, path, fault", [
    ("GET", PB, "reset_before_headers"),
    ("GET", PB, "reset_after_headers"),
    ("GET", PB, "truncate_body"),
    ("GET", r"/variables/variables\.data", "truncate_body"),
    ("GET", r"list-type=2", "reset_before_headers"),  # the listing
    ("HEAD", PB, "reset_before_headers"),  # the HEAD that verifies the download
])
def test_transient_faults_are_retried_and_the_pull_gets_the_right_digest(
        s3, source, cnn, proxy, tmp_path, caplog, method, path, fault):
    proxy.add(fault, path, method=method, times=ATTEMPTS - 1)

    with caplog.at_level(logging.INFO, logger="tfopt.components.storage.s3"):
        pulled = pull(_config(source, tmp_path / "work", proxy))

    assert pulled.digest == model_digest(cnn)
    assert _files(pulled.path) == _files(cnn)
    attempts = proxy.seen(method, path)
    assert [a.fault for a in attempts] == [fault] * (ATTEMPTS - 1) + [None]
    if method == "GET" and "list-type" not in path:
        assert len(_retries_logged(caplog)) == ATTEMPTS - 1


def test_a_read_timeout_is_retried_and_the_pull_completes(s3, source, cnn, proxy, tmp_path):
    proxy.add("delay", PB, method="GET", times=1, seconds=4.0)

    pulled = pull(_config(source, tmp_path / "work", proxy, read_timeout=1.5))

    assert pulled.digest == model_digest(cnn)
    assert [a.fault for a in proxy.seen("GET", PB)] == ["delay", None]


def test_faults_on_several_objects_at_once_are_each_retried(s3, source, cnn, proxy, tmp_path):
    proxy.add("truncate_body", PB, method="GET", times=2)
    proxy.add("reset_after_headers", r"/variables/variables\.index$", method="GET", times=2)
    proxy.add("reset_before_headers", r"/fingerprint\.pb$", method="GET", times=1)

    pulled = pull(_config(source, tmp_path / "work", proxy))

    assert pulled.digest == model_digest(cnn)
    assert len(proxy.seen("GET", PB)) == 3
    assert len(proxy.seen("GET", r"/variables/variables\.index$")) == 3
    assert len(proxy.seen("GET", r"/fingerprint\.pb$")) == 2


@pytest.mark.parametrize("fault", ["reset_before_headers", "reset_after_headers",
                                   "truncate_body"])
def test_a_persistent_fault_fails_after_the_retry_limit_and_leaves_nothing(
        s3, source, proxy, tmp_path, fault):
    proxy.add(fault, PB, method="GET")
    work = tmp_path / "work"

    with pytest.raises(S3AccessError) as caught:
        pull(_config(source, work, proxy))

    message = str(caught.value)
    assert "\n" not in message and f"s3://{s3.bucket}/{PREFIX}/saved_model.pb" in message
    assert caught.value.exit_code == 2
    assert len(proxy.seen("GET", PB)) == ATTEMPTS  # the config's limit, not botocore's own
    # Neither the final directory nor a staging directory is left: sources/ is empty.
    assert [p.relative_to(work).as_posix() for p in work.rglob("*")] == ["sources"]


def test_a_persistent_read_timeout_is_bounded_by_the_square_of_the_limit(s3, source, proxy,
                                                                         tmp_path):
    # botocore retries a GET that times out, and s3transfer restarts the download: both count.
    proxy.add("delay", PB, method="GET", seconds=2.5)

    with pytest.raises(S3AccessError, match="4 download attempts failed; the last: Read "
                                            "timeout"):
        pull(_config(source, tmp_path / "work", proxy, max_attempts=2, read_timeout=1.0))

    assert len(proxy.seen("GET", PB)) == 2 ** 2
    assert list((tmp_path / "work" / "sources").iterdir()) == []


def test_the_cli_reports_a_persistent_fault_in_one_line_with_exit_code_2(
        s3, source, proxy, tmp_path, capsys):
    proxy.add("truncate_body", PB, method="GET")
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"source: {source}\nworkdir: {tmp_path / 'work'}\n"
                      f"s3: {{endpoint_url: '{proxy.url}', region: us-east-1, "
                      f"max_attempts: {ATTEMPTS}}}\n")

    code = main(["step", "pull", "--config", str(config)])

    err = capsys.readouterr().err
    assert code == 2
    lines = error_lines(err)  # the stage lines say what ran; one line says what failed
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"tfopt: error: s3://{s3.bucket}/{PREFIX}/saved_model.pb: "
                               f"{ATTEMPTS} download attempts failed")
    assert len(proxy.seen("GET", PB)) == ATTEMPTS


def test_a_body_altered_on_the_way_fails_checksum_after_exactly_one_attempt(s3, source, proxy,
                                                                           tmp_path):
    # The object has a stored SHA-256: botocore checks the stream against it.
    proxy.add("corrupt_body", PB, method="GET")

    with pytest.raises(ChecksumMismatchError, match=f"{PREFIX}/saved_model.pb") as caught:
        pull(_config(source, tmp_path / "work", proxy))

    assert "\n" not in str(caught.value)
    assert len(proxy.seen("GET", PB)) == 1  # not retried: the store would send the same bytes
    assert list((tmp_path / "work" / "sources").iterdir()) == []


def test_an_altered_body_of_an_object_with_only_an_md5_etag_fails_our_own_check(
        s3, cnn, proxy, tmp_path):
    import boto3
    from botocore.config import Config

    # Uploaded as older clients and many tools do: no flexible checksum at all, so botocore
    # has nothing to check the stream against and the ETag's MD5 is the only evidence.
    plain = boto3.session.Session().client(
        "s3", endpoint_url=s3.endpoint_url,
        config=Config(request_checksum_calculation="when_required"))
    for path in sorted(p for p in cnn.rglob("*") if p.is_file()):
        plain.upload_file(str(path), s3.bucket, f"{PREFIX}/{path.relative_to(cnn).as_posix()}")
    head = plain.head_object(Bucket=s3.bucket, Key=f"{PREFIX}/saved_model.pb",
                             ChecksumMode="ENABLED")
    assert not any(k.startswith("Checksum") and k != "ChecksumType" for k in head)
    proxy.add("corrupt_body", PB, method="GET")

    with pytest.raises(ChecksumMismatchError, match="MD5 of the download"):
        pull(_config(f"s3://{s3.bucket}/{PREFIX}", tmp_path / "work", proxy))

    assert len(proxy.seen("GET", PB)) == 1
    assert list((tmp_path / "work" / "sources").iterdir()) == []


def test_a_ranged_multipart_download_retries_only_the_broken_part(s3, proxy, tmp_path):
    data = os.urandom(17 * MiB)  # three 8 MiB ranges (the default part size)
    s3.put("eval/big.npz", data)
    settings = S3Config(endpoint_url=proxy.url, region="us-east-1", max_attempts=ATTEMPTS,
                        multipart_threshold_mb=5)
    proxy.add("truncate_body", r"/eval/big\.npz$", method="GET", times=2)

    target = storage.download_file(f"s3://{s3.bucket}/eval/big.npz", tmp_path / "big.npz",
                                   settings)

    assert target.read_bytes() == data
    gets = proxy.seen("GET", r"/eval/big\.npz$")
    assert len(gets) == 3 + 2  # three ranges, and the two broken ones again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.npz"]
