"""A workdir whose path TensorFlow would read as a file pattern: refused in one line, up front.

TensorFlow finds a SavedModel's variables through a file pattern: under ``/data/w[1]/`` it
finds none and fails with "Failed to find any matching files", naming a file tfopt wrote.
"""

from __future__ import annotations

import pytest
from cli_testing import assert_clean_failure, run_tfopt


# [ and \: TensorFlow finds no variables file; *: it may find another directory's too
@pytest.mark.parametrize("directory", ["w[1]", "w\\1", "w*"])
def test_a_workdir_tensorflow_reads_as_a_pattern_is_refused_naming_it(tmp_path, model_dir,
                                                                      directory):
    workdir = tmp_path / directory / "work"
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"source: {model_dir('keras_cnn')}\nworkdir: '{workdir}'\n"
                      f"mlflow: {{tracking_uri: 'sqlite:///{tmp_path / 'mlflow.db'}'}}\n")

    result = run_tfopt("run", "--config", config, timeout=120)

    assert_clean_failure(result, 2, f"workdir {workdir} holds", "file pattern")
    assert not (tmp_path / directory).exists()  # refused before anything is written
