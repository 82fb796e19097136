"""extract_archive: plain files and directories come out; anything that could escape does not."""

import io
import tarfile

import pytest

from tfopt.components.storage import archive
from tfopt.components.storage.archive import (
    CorruptArchiveError,
    UnsafeArchiveError,
    extract_archive,
    is_archive,
)


def _file(name: str, data: bytes = b"data") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def _archive(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _everything_under(root) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_plain_files_and_directories_are_extracted_byte_for_byte(tmp_path):
    src = _archive(tmp_path / "model.tar.gz", [
        _special("cnn", tarfile.DIRTYPE),
        _file("cnn/saved_model.pb", b"\x08\x01graph"),
        _file("cnn/variables/variables.index", b"index"),
    ])

    extract_archive(src, tmp_path / "out")

    out = tmp_path / "out"
    assert (out / "cnn/saved_model.pb").read_bytes() == b"\x08\x01graph"
    assert (out / "cnn/variables/variables.index").read_bytes() == b"index"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.tar.gz", "out"]


@pytest.mark.parametrize("member, reason", [
    (_file("../evil.txt"), "'..' path segment"),
    (_file("cnn/../../evil.txt"), "'..' path segment"),
    (_file("/tmp/evil.txt"), "absolute path"),
    (_special("cnn/link", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    (_special("cnn/inside_link", tarfile.SYMTYPE, "saved_model.pb"), "symbolic link"),
    (_special("cnn/hard", tarfile.LNKTYPE, "/etc/passwd"), "hard link"),
    (_special("cnn/tty", tarfile.CHRTYPE), "device, FIFO"),
    (_special("cnn/disk", tarfile.BLKTYPE), "device, FIFO"),
    (_special("cnn/pipe", tarfile.FIFOTYPE), "device, FIFO"),
], ids=["dotdot", "nested-dotdot", "absolute", "symlink-out", "symlink-in", "hardlink",
        "char-device", "block-device", "fifo"])
def test_an_unsafe_member_refuses_the_whole_archive_and_writes_nothing(tmp_path, member, reason):
    work = tmp_path / "work"
    work.mkdir()
    src = _archive(work / "model.tar.gz", [_file("cnn/saved_model.pb"), member])

    with pytest.raises(UnsafeArchiveError, match=reason) as caught:
        extract_archive(src, work / "out")

    message = str(caught.value)
    assert member[0].name in message and "\n" not in message
    assert _everything_under(tmp_path) == {"work", "work/model.tar.gz"}


def test_too_many_members_is_refused_as_a_bomb(tmp_path):
    src = _archive(tmp_path / "many.tar.gz", [_file(f"f{i}") for i in range(5)])
    with pytest.raises(UnsafeArchiveError, match="more than 3 members"):
        extract_archive(src, tmp_path / "out", max_members=3)
    assert not (tmp_path / "out").exists()


def test_too_many_bytes_is_refused_as_a_bomb(tmp_path):
    src = _archive(tmp_path / "big.tar.gz", [_file("a", b"x" * 600), _file("b", b"x" * 600)])
    with pytest.raises(UnsafeArchiveError, match="more than 1000 bytes"):
        extract_archive(src, tmp_path / "out", max_bytes=1000)
    assert not (tmp_path / "out").exists()


def test_the_module_limits_apply_when_none_are_passed(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_EXTRACTED_BYTES", 10)
    src = _archive(tmp_path / "big.tar.gz", [_file("a", b"x" * 11)])
    with pytest.raises(UnsafeArchiveError, match="more than 10 bytes"):
        extract_archive(src, tmp_path / "out")


def test_pythons_data_filter_still_refuses_what_our_checks_would_miss(tmp_path, monkeypatch):
    # Belt and braces: with our own member checks switched off, filter="data" alone must still
    # refuse a member that escapes the destination.
    monkeypatch.setattr(archive, "check_member", lambda member: None)
    work = tmp_path / "work"
    work.mkdir()
    src = _archive(work / "model.tar.gz", [_special("link", tarfile.SYMTYPE, "/etc/passwd")])

    with pytest.raises(UnsafeArchiveError, match="link"):
        extract_archive(src, work / "out")
    assert _everything_under(tmp_path) == {"work", "work/model.tar.gz"}


def test_a_file_that_is_not_a_gzip_tar_is_a_one_line_error(tmp_path):
    bogus = tmp_path / "model.tar.gz"
    bogus.write_bytes(b"this is not an archive")
    with pytest.raises(CorruptArchiveError, match="not a readable .tar.gz") as caught:
        extract_archive(bogus, tmp_path / "out")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_truncated_archive_is_a_one_line_error_and_leaves_nothing(tmp_path):
    whole = _archive(tmp_path / "whole.tar.gz", [_file("a", bytes(range(256)) * 400)])
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(CorruptArchiveError):
        extract_archive(truncated, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["truncated.tar.gz", "whole.tar.gz"]


@pytest.mark.parametrize("name, expected", [
    ("model.tar.gz", True), ("MODEL.TGZ", True), ("model.tar", False), ("model", False),
    ("saved_model.pb", False)])
def test_archives_are_recognised_by_their_suffix(name, expected):
    assert is_archive(name) is expected
