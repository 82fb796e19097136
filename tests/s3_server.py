"""A real S3 endpoint for tests: moto's server on 127.0.0.1, reached over HTTP through boto3.

Import both fixtures into a test module (``from s3_server import moto_endpoint_fixture,
s3_fixture``) and ask for them by their names, ``moto_endpoint`` and ``s3``.
``moto_endpoint`` starts ``moto_server`` from the venv once per session on a free port and
stops it at the end; ``s3`` gives each test AWS settings in the environment only (as the
pipeline reads them), a client, and a fresh bucket.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from local_ports import free_port
from served_process import responds, served

STARTUP_TIMEOUT_SECONDS = 30
REGION = "us-east-1"


@pytest.fixture(scope="session", name="moto_endpoint")
def moto_endpoint_fixture(tmp_path_factory):
    """``http://127.0.0.1:<port>`` of a running ``moto_server`` process."""
    executable = Path(sys.executable).parent / "moto_server"
    if not executable.exists():
        pytest.fail(f"moto_server not found beside {sys.executable}; install moto[server]")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("moto") / "moto_server.log"
    with served([str(executable), "-H", "127.0.0.1", "-p", str(port)], f"{url}/moto-api/",
                log_path, STARTUP_TIMEOUT_SECONDS, ready=responds):
        yield url


@dataclass
class MotoS3:
    endpoint_url: str
    client: object
    bucket: str

    def put(self, key: str, body: bytes, **kwargs) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **kwargs)

    def upload_directory(self, directory: Path, prefix: str, **extra_args) -> list[str]:
        """Every file under ``directory`` as ``prefix/<relative path>``; returns the keys."""
        keys = []
        for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
            key = f"{prefix.rstrip('/')}/{path.relative_to(directory).as_posix()}"
            self.client.upload_file(str(path), self.bucket, key, ExtraArgs=extra_args or None)
            keys.append(key)
        return keys


class WrongChecksumClient:
    """A real client, except that head_object reports the SHA-256 of other bytes for ``key``.

    moto drops a wrong checksum given at upload instead of storing it, so a store that lies
    about an object's checksum is simulated here, on top of real requests.
    """

    def __init__(self, client, key: str):
        self._client, self._key = client, key

    def __getattr__(self, name):
        return getattr(self._client, name)

    def head_object(self, **kwargs):
        response = self._client.head_object(**kwargs)
        if kwargs["Key"] == self._key:
            other = base64.b64encode(hashlib.sha256(b"not the stored bytes").digest()).decode()
            response = {**response, "ChecksumSHA256": other}
        return response


def fake_aws_credentials(monkeypatch, tmp_path) -> None:
    """Credentials and region in the environment only, as the pipeline reads them."""
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    # No developer's ~/.aws files and no instance-metadata lookups leak into a test.
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(name="s3")
def s3_fixture(moto_endpoint, tmp_path, monkeypatch):
    """Credentials and region in the environment only, a real client, and a fresh bucket."""
    import boto3

    fake_aws_credentials(monkeypatch, tmp_path)
    client = boto3.session.Session().client("s3", endpoint_url=moto_endpoint)
    bucket = f"test-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=bucket)
    return MotoS3(moto_endpoint, client, bucket)
