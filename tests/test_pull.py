"""pull: the source SavedModel on local disk, from a directory, an archive or S3; once per content.

S3 sources are read from a real moto server over HTTP. GET requests are counted with botocore's
own event hooks on a real client, so "reused without downloading" is observed, not assumed.
The checksum-mismatch case uses a real client whose head_object reports a wrong SHA-256 (moto
drops a wrong checksum at upload instead of storing it, so the store itself cannot be made to
lie); the comparison itself is tested on real downloads in test_s3_download.py.
"""

import io
import json
import tarfile
from pathlib import Path

import pytest
from s3_server import WrongChecksumClient, moto_endpoint_fixture, s3_fixture  # noqa: F401

from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.steps import pull as pull_module
from tfopt.components.steps.pull import MARKER, pull
from tfopt.components.storage.archive import UnsafeArchiveError
from tfopt.components.storage.s3 import ChecksumMismatchError, UnsafeKeyError, make_client
from tfopt.optimizer.benchmark.environment import model_digest
from tfopt.optimizer.errors import NotASavedModelError, SourceNotFoundError, TfoptError
from tfopt.optimizer.model.savedmodel import list_signatures

PREFIX = "models/cnn"


def _config(source, workdir, endpoint=None):
    return config_from_mapping({"source": str(source), "workdir": str(workdir),
                                "s3": {"endpoint_url": endpoint, "region": "us-east-1"}})


def _files(root) -> dict[str, bytes]:
    root = Path(root)
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _counting_gets(client) -> list[str]:
    keys: list[str] = []
    client.meta.events.register("before-parameter-build.s3.GetObject",
                                lambda params, **_: keys.append(params["Key"]))
    return keys


def _tar_gz(src_dir, archive_path, top_level: str):
    with tarfile.open(archive_path, "w:gz") as tar:
        tar.add(src_dir, arcname=top_level)
    return archive_path


@pytest.fixture
def cnn(model_dir):
    return model_dir("keras_cnn")


@pytest.fixture
def cnn_on_s3(s3, cnn):
    s3.upload_directory(cnn, PREFIX, ChecksumAlgorithm="SHA256")
    return f"s3://{s3.bucket}/{PREFIX}"


def test_a_local_directory_is_copied_under_the_workdir_with_its_digest(cnn, tmp_path):
    pulled = pull(_config(cnn, tmp_path / "work"))

    path = tmp_path / "work" / "sources"
    assert pulled.path.startswith(str(path))
    assert pulled.uri == str(cnn)
    assert pulled.digest == model_digest(cnn)
    assert _files(cnn) == _files(pulled.path)
    assert "serving_default" in list_signatures(pulled.path)


def test_pulling_a_local_directory_again_reuses_the_first_pull(cnn, tmp_path):
    first = pull(_config(cnn, tmp_path / "work"))
    marker = next((tmp_path / "work" / "sources").glob(f"*/{MARKER}"))
    stamp = marker.stat().st_mtime_ns

    again = pull(_config(cnn, tmp_path / "work"))

    assert again == first
    assert marker.stat().st_mtime_ns == stamp
    assert len(list((tmp_path / "work" / "sources").iterdir())) == 1


def test_a_local_tar_gz_yields_its_single_top_level_savedmodel_directory(cnn, tmp_path):
    archive = _tar_gz(cnn, tmp_path / "cnn.tar.gz", top_level="cnn")

    pulled = pull(_config(archive, tmp_path / "work"))

    assert pulled.path.endswith("/cnn")
    assert pulled.digest == model_digest(cnn)
    assert "serving_default" in list_signatures(pulled.path)


def test_a_local_path_that_does_not_exist_is_source_not_found(tmp_path):
    with pytest.raises(SourceNotFoundError, match="no such source"):
        pull(_config(tmp_path / "missing", tmp_path / "work"))


def test_a_directory_that_is_not_a_savedmodel_is_refused_in_one_line(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a model")

    with pytest.raises(NotASavedModelError, match="is not a SavedModel") as caught:
        pull(_config(tmp_path / "notes", tmp_path / "work"))
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "work" / "sources").exists()


def test_an_archive_holding_no_savedmodel_leaves_nothing_in_the_workdir(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "a.txt").write_text("a")
    (tmp_path / "junk" / "b.txt").write_text("b")
    archive = _tar_gz(tmp_path / "junk", tmp_path / "junk.tar.gz", top_level="junk")

    with pytest.raises(NotASavedModelError, match="junk.tar.gz is not a SavedModel"):
        pull(_config(archive, tmp_path / "work"))
    assert list((tmp_path / "work" / "sources").iterdir()) == []


def test_an_unsafe_local_archive_is_refused_and_nothing_lands_outside_the_workdir(tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("cnn/../../escaped.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))

    with pytest.raises(UnsafeArchiveError, match=r"cnn/\.\./\.\./escaped\.txt"):
        pull(_config(archive, tmp_path / "work"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.tar.gz", "work"]
    assert list((tmp_path / "work" / "sources").iterdir()) == []
    assert not list(tmp_path.rglob("escaped.txt"))


def test_an_s3_prefix_is_pulled_as_the_same_savedmodel(s3, cnn, cnn_on_s3, tmp_path):
    pulled = pull(_config(cnn_on_s3, tmp_path / "work", s3.endpoint_url))

    assert pulled.uri == cnn_on_s3
    assert pulled.digest == model_digest(cnn)
    assert _files(cnn) == _files(pulled.path)
    assert "serving_default" in list_signatures(pulled.path)


def test_pulling_an_unchanged_prefix_again_downloads_nothing(s3, cnn_on_s3, tmp_path):
    config = _config(cnn_on_s3, tmp_path / "work", s3.endpoint_url)
    client = make_client(config.s3)
    gets = _counting_gets(client)

    first = pull(config, s3_client=client)
    downloaded = len(gets)
    again = pull(config, s3_client=client)

    assert downloaded >= 3  # saved_model.pb, variables index and data at least
    assert len(gets) == downloaded
    assert again == first


def test_a_changed_object_is_pulled_again_with_a_new_digest(s3, cnn_on_s3, tmp_path):
    config = _config(cnn_on_s3, tmp_path / "work", s3.endpoint_url)
    client = make_client(config.s3)
    gets = _counting_gets(client)
    first = pull(config, s3_client=client)
    before = len(gets)

    s3.put(f"{PREFIX}/fingerprint.pb", b"a different fingerprint")
    second = pull(config, s3_client=client)

    assert len(gets) > before
    assert second.digest != first.digest and second.path != first.path
    assert (Path(second.path) / "fingerprint.pb").read_bytes() == b"a different fingerprint"
    assert model_digest(first.path) == first.digest  # the earlier pull is left intact


def test_an_s3_tar_gz_is_downloaded_and_extracted(s3, cnn, tmp_path):
    archive = _tar_gz(cnn, tmp_path / "cnn.tar.gz", top_level="cnn")
    s3.client.upload_file(str(archive), s3.bucket, "archives/cnn.tar.gz")
    config = _config(f"s3://{s3.bucket}/archives/cnn.tar.gz", tmp_path / "work", s3.endpoint_url)

    pulled = pull(config)

    assert pulled.digest == model_digest(cnn)
    assert "serving_default" in list_signatures(pulled.path)
    assert not list((tmp_path / "work").rglob("source.tar.gz"))  # the download is not kept
    assert pull(config) == pulled


def test_an_s3_key_with_dotdot_is_refused_and_nothing_is_written(s3, cnn_on_s3, tmp_path):
    s3.put(f"{PREFIX}/../../escaped.txt", b"evil")

    with pytest.raises(UnsafeKeyError, match=r"models/cnn/\.\./\.\./escaped\.txt"):
        pull(_config(cnn_on_s3, tmp_path / "work", s3.endpoint_url))
    assert list(tmp_path.rglob("*")) == []  # not even the workdir was created


def test_a_checksum_mismatch_fails_the_pull_and_leaves_no_partial_model(s3, cnn_on_s3, tmp_path):
    config = _config(cnn_on_s3, tmp_path / "work", s3.endpoint_url)
    lying = WrongChecksumClient(make_client(config.s3), f"{PREFIX}/saved_model.pb")

    with pytest.raises(ChecksumMismatchError, match=r"models/cnn/saved_model\.pb") as caught:
        pull(config, s3_client=lying)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    assert list((tmp_path / "work" / "sources").iterdir()) == []

    # Nothing was recorded, so an honest store is pulled from scratch.
    pulled = pull(config)
    assert "serving_default" in list_signatures(pulled.path)


def test_a_pull_whose_marker_is_missing_is_done_again(s3, cnn_on_s3, tmp_path):
    config = _config(cnn_on_s3, tmp_path / "work", s3.endpoint_url)
    client = make_client(config.s3)
    gets = _counting_gets(client)
    first = pull(config, s3_client=client)
    marker = next((tmp_path / "work" / "sources").glob(f"*/{MARKER}"))
    assert json.loads(marker.read_text())["digest"] == first.digest
    marker.unlink()  # as if the pull had been killed before its marker was written
    before = len(gets)

    again = pull(config, s3_client=client)

    assert len(gets) > before
    assert again == first and marker.is_file()


def test_a_missing_bucket_names_the_bucket(s3, tmp_path):
    with pytest.raises(SourceNotFoundError, match="bucket 'no-such-bucket-y' does not exist"):
        pull(_config("s3://no-such-bucket-y/models/cnn", tmp_path / "work", s3.endpoint_url))


def test_a_missing_archive_bucket_names_the_bucket(s3, tmp_path):
    with pytest.raises(SourceNotFoundError, match="bucket 'no-such-bucket-z' does not exist"):
        pull(_config("s3://no-such-bucket-z/cnn.tar.gz", tmp_path / "work", s3.endpoint_url))


def test_an_empty_prefix_names_bucket_and_prefix(s3, tmp_path):
    with pytest.raises(SourceNotFoundError, match=f"no objects under s3://{s3.bucket}/empty/"):
        pull(_config(f"s3://{s3.bucket}/empty", tmp_path / "work", s3.endpoint_url))


def test_an_unsupported_scheme_is_a_one_line_error(tmp_path):
    with pytest.raises(TfoptError, match="unsupported source 'gs://b/m'"):
        pull(_config("gs://b/m", tmp_path / "work"))


def test_when_a_concurrent_pull_finishes_first_its_result_is_used(cnn, tmp_path, monkeypatch):
    config = _config(cnn, tmp_path / "work")
    copy, winner = pull_module.copy_model_tree, []

    def copy_while_another_pull_finishes(*args, **kwargs):
        if not winner:
            winner.append(None)
            winner[0] = pull(config)  # started later, renamed into place first
        return copy(*args, **kwargs)

    monkeypatch.setattr(pull_module, "copy_model_tree", copy_while_another_pull_finishes)
    loser = pull(config)

    assert loser == winner[0]
    sources = tmp_path / "work" / "sources"
    assert [p.name for p in sources.iterdir()] == [Path(loser.path).relative_to(sources).parts[0]]
    assert model_digest(loser.path) == loser.digest
