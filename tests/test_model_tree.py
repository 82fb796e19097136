"""A local source, a download and an upload hold their files themselves: no path leads out.

A symbolic link (to a file or a directory), a hard link shared with a file outside and a
special file are refused by pull in one line naming the entry, before anything is copied, and
the workdir holds nothing afterwards. ``security.allow_internal_links`` lets a link that stays
inside the model through, copied as a plain file; a link out is refused whatever it says. The
copy itself never follows a link it was not allowed, even one swapped in after the check.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_testing import assert_clean_failure, run_tfopt

from tfopt.components.config.pipeline_config import config_from_mapping
from tfopt.components.steps.pull import pull
from tfopt.components.storage.model_tree import (
    UnsafeModelTreeError,
    check_model_tree,
    copy_model_tree,
)
from tfopt.optimizer.benchmark.environment import model_digest

SHARD = "variables/variables.data-00000-of-00001"


@pytest.fixture
def source(tmp_path, model_dir):
    """A private copy of a real SavedModel, with an assets/ directory, to plant links in."""
    path = tmp_path / "source"
    shutil.copytree(model_dir("keras_cnn"), path)
    (path / "assets").mkdir(exist_ok=True)
    (path / "assets" / "vocab.txt").write_text("a\nb\n")
    return path


def _config(source, workdir, **security):
    return config_from_mapping({"source": str(source), "workdir": str(workdir),
                                "security": security})


def _refused(source, workdir, entry: str, *phrases: str, **security) -> str:
    with pytest.raises(UnsafeModelTreeError) as caught:
        pull(_config(source, workdir, **security))
    message = str(caught.value)
    assert "\n" not in message and f"'{entry}'" in message, message
    for phrase in phrases:
        assert phrase in message, message
    sources = Path(workdir) / "sources"
    assert not sources.exists() or not any(sources.iterdir())  # nothing copied, nothing left
    return message


def _no_links(root) -> bool:
    return not any(p.is_symlink() for p in Path(root).rglob("*"))


def test_a_symlinked_asset_out_of_the_model_is_refused_and_nothing_is_copied(source, tmp_path):
    (source / "assets" / "leak.txt").symlink_to("/etc/hostname")
    _refused(source, tmp_path / "work", "assets/leak.txt", "leads out of the model")
    # Whatever the option says: a link out is never followed.
    _refused(source, tmp_path / "work", "assets/leak.txt", "leads out of the model",
             allow_internal_links=True)


def test_a_symlinked_variables_shard_is_refused(source, tmp_path):
    elsewhere = tmp_path / "elsewhere.data"
    shutil.move(source / SHARD, elsewhere)
    (source / SHARD).symlink_to(elsewhere)
    _refused(source, tmp_path / "work", SHARD, "symbolic link", allow_internal_links=True)


def test_a_symlinked_directory_is_refused_even_when_it_stays_inside(source, tmp_path):
    (source / "assets" / "etc").symlink_to("/etc", target_is_directory=True)
    _refused(source, tmp_path / "work", "assets/etc", "leads out of the model")
    (source / "assets" / "etc").unlink()
    (source / "assets" / "again").symlink_to("../variables", target_is_directory=True)
    _refused(source, tmp_path / "work", "assets/again", "to a directory",
             allow_internal_links=True)


def test_a_dotdot_link_that_resolves_out_through_the_model_is_refused(source, tmp_path):
    (tmp_path / "secret.txt").write_text("secret")
    (source / "assets" / "vocab2.txt").symlink_to("../../secret.txt")
    _refused(source, tmp_path / "work", "assets/vocab2.txt", "leads out of the model",
             allow_internal_links=True)


def test_a_hard_link_shared_with_a_file_outside_is_refused(source, tmp_path):
    os.link(source / "assets" / "vocab.txt", tmp_path / "outside-name.txt")
    _refused(source, tmp_path / "work", "assets/vocab.txt", "hard link",
             allow_internal_links=True)


def test_a_special_file_is_refused(source, tmp_path):
    os.mkfifo(source / "assets" / "pipe")
    _refused(source, tmp_path / "work", "assets/pipe", "FIFO")


def test_a_link_that_stays_inside_is_refused_by_default_with_the_option_named(source, tmp_path):
    (source / "assets" / "vocab2.txt").symlink_to("vocab.txt")
    _refused(source, tmp_path / "work", "assets/vocab2.txt", "security.allow_internal_links")


def test_with_the_option_a_link_inside_is_copied_as_a_plain_file(source, tmp_path):
    (source / "assets" / "vocab2.txt").symlink_to("vocab.txt")
    (source / "assets" / "deep").mkdir()
    (source / "assets" / "deep" / "up.txt").symlink_to("../vocab.txt")
    os.link(source / "assets" / "vocab.txt", source / "assets" / "hard.txt")

    pulled = pull(_config(source, tmp_path / "work", allow_internal_links=True))

    copy = Path(pulled.path)
    assert _no_links(copy)
    for name in ("vocab2.txt", "deep/up.txt", "hard.txt"):
        assert (copy / "assets" / name).read_text() == "a\nb\n"
        assert (copy / "assets" / name).stat().st_nlink == 1
    assert pulled.digest == model_digest(source) == model_digest(copy)


def test_a_link_swapped_in_after_the_check_is_not_followed_by_the_copy(source, tmp_path):
    check_model_tree(source, "src")
    (source / "assets" / "vocab.txt").unlink()
    (source / "assets" / "vocab.txt").symlink_to("/etc/hostname")  # the race, made certain
    with pytest.raises(UnsafeModelTreeError, match="'assets/vocab.txt'"):
        copy_model_tree(source, tmp_path / "copy", "src")
    assert not (tmp_path / "copy" / "assets" / "vocab.txt").exists()


def test_the_cli_refuses_a_linked_source_in_one_line_with_exit_2(source, tmp_path):
    (source / "assets" / "leak.txt").symlink_to("/etc/hostname")
    config = tmp_path / "pipeline.yaml"
    config.write_text(json.dumps({"source": str(source), "workdir": str(tmp_path / "work")}))
    result = run_tfopt("step", "pull", "--config", config)
    assert_clean_failure(result, 2, "assets/leak.txt", "symbolic link")
    assert not (tmp_path / "work" / "sources").exists() or not any(
        (tmp_path / "work" / "sources").iterdir())
