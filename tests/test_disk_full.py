"""A disk that fills up while a writer writes: a clear error, nothing half-written left behind.

The disk is real: a tmpfs of a few hundred KiB mounted for the test (which needs root, as the
project's machines and CI run), filled with a filler file until only the room a case needs is
left. So ``write()`` fails with ENOSPC in whichever layer does the writing: Python's own file
objects, shutil, s3transfer's download threads, tarfile, matplotlib, and TensorFlow's C++ file
system. Each writer must then raise one line naming its destination and the cause, and leave
its directory as it found it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from cli_testing import error_lines
from s3_server import moto_endpoint_fixture, s3_fixture  # noqa: F401

from tfopt.components.cli import main
from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.pipeline.artifacts import PulledModel
from tfopt.components.pipeline.workspace import Workspace
from tfopt.components.steps.pull import pull
from tfopt.optimizer.errors import DestinationError, TfoptError

PAGE = 4096
DISK_BYTES = 512 * 1024
NO_SPACE = "No space left on device"


class SmallDisk:
    def __init__(self, mount: Path):
        self.mount = mount
        self.filler = mount / "filler"

    def free(self) -> int:
        stat = os.statvfs(self.mount)
        return stat.f_bavail * stat.f_frsize

    def leave(self, free_bytes: int) -> None:
        """Grow the filler until ``free_bytes`` (rounded up to pages) are left; 0: none."""
        pages = -(-free_bytes // PAGE)
        with open(self.filler, "ab") as filler:
            try:
                while self.free() > pages * PAGE:
                    filler.write(b"\0" * min(self.free() - pages * PAGE, 64 * 1024))
                    filler.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC and pages == 0, exc
        assert self.free() == pages * PAGE, (self.free(), pages)

    def listing(self) -> set[str]:
        return {p.relative_to(self.mount).as_posix() for p in self.mount.rglob("*")}


@pytest.fixture
def disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0755",
                              "tmpfs", str(mount)], check=False, capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield SmallDisk(mount)
    finally:
        unmounted = subprocess.run(["umount", str(mount)], check=False, capture_output=True)
        if unmounted.returncode != 0:  # still busy: detach it now, free it when unused
            subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)


def _assert_disk_full_error(exc: BaseException, names: Path | str) -> None:
    message = str(exc)
    assert isinstance(exc, TfoptError), (type(exc), message)
    assert "\n" not in message and NO_SPACE in message and str(names) in message, message
    assert len(message) < len(str(names)) + 120, message  # the cause once, not per file


@pytest.fixture(scope="module")
def frozen_cnn(model_dir):
    from tfopt.optimizer.model.freeze import freeze

    return freeze(model_dir("keras_cnn"))


# --- a SavedModel export (TensorFlow's file system, then Python's) ----------------------------


def _graph_bytes(frozen, tmp_path) -> int:
    from tfopt.optimizer.model.export import write_saved_model

    return (write_saved_model(frozen, tmp_path / "sized") / "saved_model.pb").stat().st_size


@pytest.mark.parametrize("room", ["none", "graph_only"])
def test_a_savedmodel_export_on_a_full_disk_leaves_nothing(frozen_cnn, disk, tmp_path, room):
    from tfopt.optimizer.model.export import write_saved_model

    # "graph_only": TensorFlow writes saved_model.pb, then the provenance file finds no room.
    disk.leave(0 if room == "none" else _graph_bytes(frozen_cnn, tmp_path))
    before = disk.listing()
    target = disk.mount / "out" / "optimized"

    with pytest.raises(DestinationError) as caught:
        write_saved_model(frozen_cnn, target)

    _assert_disk_full_error(caught.value, target)
    assert disk.listing() <= before | {"out"} and not target.exists()


def test_the_cli_reports_a_full_disk_in_one_line_with_exit_code_2(frozen_cnn, model_dir, disk,
                                                                    capsys):
    disk.leave(PAGE)
    target = disk.mount / "frozen"

    code = main(["freeze", str(model_dir("keras_cnn")), str(target)])

    err = capsys.readouterr().err
    lines = error_lines(err)  # the stage lines aside
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"tfopt: error: cannot write {target}") and NO_SPACE in lines[0]
    assert disk.listing() == {"filler"}


# --- the workspace's step records --------------------------------------------------------------


def test_a_step_record_on_a_full_disk_leaves_no_partial_record(disk):
    ws = Workspace(disk.mount / "runs" / "key")
    step_dir = ws.step_dir("pull")
    disk.leave(0)

    with pytest.raises(DestinationError) as caught:
        ws.record("pull", PulledModel(uri="s3://b/m", path="/m", digest="sha256:0"))

    _assert_disk_full_error(caught.value, step_dir / "result.json")
    assert list(step_dir.iterdir()) == []
    assert ws.finished("pull") is None  # the step runs again once there is room


def test_a_step_whose_record_cannot_be_written_runs_again_when_there_is_room(disk):
    ws = Workspace(disk.mount / "runs" / "key")
    ws.step_dir("pull")
    disk.leave(0)
    runs = []

    def step(_step_dir):
        runs.append(1)
        return PulledModel(uri="s3://b/m", path="/m", digest="sha256:0")

    with pytest.raises(DestinationError):
        ws.reuse_or_run("pull", PulledModel, step)
    disk.filler.unlink()
    again = ws.reuse_or_run("pull", PulledModel, step)

    assert len(runs) == 2 and again.digest == "sha256:0"
    assert ws.finished("pull") == again.to_dict()


# --- pull: copies, downloads and extraction ----------------------------------------------------


def _pull_config(source, workdir, endpoint=None):
    return config_from_mapping({"source": str(source), "workdir": str(workdir),
                                "s3": {"endpoint_url": endpoint, "region": "us-east-1"}})


def _sources_left(workdir: Path) -> list[str]:
    sources = workdir / "sources"
    return sorted(p.name for p in sources.iterdir()) if sources.exists() else []


@pytest.mark.parametrize("room", [0, 64 * 1024])
def test_pulling_a_local_model_onto_a_full_disk_leaves_no_partial_source(model_dir, disk, room):
    workdir = disk.mount / "work"
    (workdir / "sources").mkdir(parents=True)
    disk.leave(room)

    with pytest.raises(DestinationError) as caught:
        pull(_pull_config(model_dir("keras_cnn"), workdir))

    _assert_disk_full_error(caught.value, workdir / "sources")
    assert _sources_left(workdir) == []


@pytest.mark.parametrize("room", [0, 64 * 1024])
def test_an_s3_download_onto_a_full_disk_leaves_no_partial_source(s3, model_dir, disk, room):
    s3.upload_directory(model_dir("keras_cnn"), "models/cnn")
    workdir = disk.mount / "work"
    (workdir / "sources").mkdir(parents=True)
    disk.leave(room)

    with pytest.raises(TfoptError) as caught:
        pull(_pull_config(f"s3://{s3.bucket}/models/cnn", workdir, s3.endpoint_url))

    _assert_disk_full_error(caught.value, workdir / "sources")
    assert _sources_left(workdir) == []


def test_an_s3_archive_with_no_room_to_extract_leaves_no_partial_source(s3, model_dir, disk,
                                                                         tmp_path):
    archive = tmp_path / "cnn.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(model_dir("keras_cnn"), arcname="cnn")
    s3.client.upload_file(str(archive), s3.bucket, "archives/cnn.tar.gz")
    workdir = disk.mount / "work"
    (workdir / "sources").mkdir(parents=True)
    # Room for the download, not for the SavedModel inside it.
    disk.leave(archive.stat().st_size + 16 * 1024)

    with pytest.raises(TfoptError) as caught:
        pull(_pull_config(f"s3://{s3.bucket}/archives/cnn.tar.gz", workdir, s3.endpoint_url))

    _assert_disk_full_error(caught.value, workdir / "sources")
    assert _sources_left(workdir) == []


# --- the report --------------------------------------------------------------------------------


@pytest.mark.parametrize("room", [0, 24 * 1024])
def test_a_report_on_a_full_disk_leaves_no_partial_report(disk, room):
    from benchmark_testing import noisy_samples, synthetic_result

    from tfopt.optimizer.gate.verdict import GateConfig, evaluate_gate
    from tfopt.optimizer.report.write import write_report

    result = synthetic_result({1: noisy_samples(0.010, 40, seed=1)},
                              {"optimized": {"samples": {1: noisy_samples(0.008, 40, seed=2)}}})
    decision = evaluate_gate(result, GateConfig())
    (disk.mount / "gate").mkdir()
    disk.leave(room)
    before = disk.listing()

    with pytest.raises(DestinationError) as caught:
        write_report(result, disk.mount / "gate" / "report", decision)

    _assert_disk_full_error(caught.value, disk.mount / "gate" / "report")
    assert disk.listing() == before
