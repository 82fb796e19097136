"""atomic_directory and atomic_file: the destination appears whole or not at all."""

import pytest

from tfopt.optimizer.errors import DestinationError
from tfopt.optimizer.files.atomic import atomic_directory, atomic_file


def test_success_renames_the_staging_directory_into_place(tmp_path):
    dst = tmp_path / "model"
    with atomic_directory(dst) as staging:
        staging.mkdir()
        (staging / "file.txt").write_text("done")
        assert not dst.exists()
    assert (dst / "file.txt").read_text() == "done"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_failure_midway_leaves_nothing(tmp_path):
    dst = tmp_path / "model"
    with pytest.raises(RuntimeError, match="boom"), atomic_directory(dst) as staging:
        staging.mkdir()
        (staging / "half.txt").write_text("half")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_the_previous_version(tmp_path):
    dst = tmp_path / "model"
    dst.mkdir()
    (dst / "v1.txt").write_text("v1")
    with pytest.raises(RuntimeError), atomic_directory(dst, overwrite=True) as staging:
        staging.mkdir()
        raise RuntimeError("crash while writing v2")
    assert (dst / "v1.txt").read_text() == "v1"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_existing_destination_is_refused_without_overwrite(tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(DestinationError, match="already exists"), \
            atomic_directory(tmp_path / "model"):
        pass


def test_atomic_file_appears_whole_with_nothing_beside_it(tmp_path):
    dst = tmp_path / "model.tflite"
    with atomic_file(dst) as staging:
        staging.write_bytes(b"flatbuffer")
        assert not dst.exists() and staging.parent == tmp_path
    assert dst.read_bytes() == b"flatbuffer"
    assert [p.name for p in tmp_path.iterdir()] == ["model.tflite"]


def test_atomic_file_failure_midway_keeps_the_previous_file(tmp_path):
    dst = tmp_path / "model.tflite"
    dst.write_bytes(b"v1")
    with pytest.raises(RuntimeError, match="crash"), atomic_file(dst, overwrite=True) as staging:
        staging.write_bytes(b"half of v2")
        raise RuntimeError("crash while writing v2")
    assert dst.read_bytes() == b"v1"
    assert [p.name for p in tmp_path.iterdir()] == ["model.tflite"]
    with pytest.raises(DestinationError, match="already exists"), atomic_file(dst):
        pass
    with pytest.raises(DestinationError, match="is a directory"), atomic_file(tmp_path):
        pass
