"""A per-model runtime is benchmarked at the thread count it would be served with."""

import pytest

from tfopt.optimizer.benchmark.harness import BenchmarkConfig, Subject, run_benchmark
from tfopt.optimizer.benchmark.result import CHAMPION
from tfopt.optimizer.benchmark.thread_choice import choose_threads, threads_for
from tfopt.optimizer.candidates.litert.convert import convert_to_litert
from tfopt.optimizer.inputs.generated import make_inputs
from tfopt.optimizer.runtime import read_signature

QUICK = BenchmarkConfig(batch_sizes=(1,), warmup=3, min_runs=30, min_seconds=0.2)


@pytest.fixture(scope="module")
def small_litert(model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("thread_choice") / "model.tflite"
    convert_to_litert(model_dir("keras_cnn"), path, "fp32")
    return path


@pytest.mark.parametrize("ratio, threads", [(0.5, 1), (0.96, 1), (0.97, 4), (1.3, 4)])
def test_one_thread_only_when_it_is_clearly_faster_than_all_cpus(ratio, threads):
    assert threads_for(ratio, cpus=4) == threads


def test_both_counts_are_timed_against_each_other(small_litert):
    feeds = make_inputs(read_signature(small_litert), 1)

    threads, ratio = choose_threads(small_litert, "serving_default", "tflite", feeds, cpus=2)

    assert 0.1 < ratio < 10 and threads == threads_for(ratio, 2)


def test_on_one_cpu_there_is_nothing_to_choose(small_litert):
    feeds = make_inputs(read_signature(small_litert), 1)
    assert choose_threads(small_litert, "serving_default", "tflite", feeds, cpus=1) == (1, None)


def test_without_a_champion_a_count_is_chosen(small_litert, model_dir):
    messages = []
    result = run_benchmark(Subject.baseline(model_dir("keras_cnn"), label="input"),
                           [Subject.candidate(small_litert, label="litert")], QUICK,
                           progress=messages.append)

    chosen = result.candidate("litert").num_threads
    assert chosen in (1, 2)
    assert any(m.startswith(f"litert: {chosen} thread(s) (1 thread takes") for m in messages)


def test_a_candidate_in_the_champions_runtime_runs_at_the_champions_count(small_litert,
                                                                          model_dir):
    messages = []
    result = run_benchmark(
        Subject.baseline(small_litert, CHAMPION, label="champion", num_threads=1),
        [Subject.candidate(small_litert, label="same_file"),
         Subject.candidate(model_dir("keras_cnn"), label="savedmodel")], QUICK,
        progress=messages.append)

    same, savedmodel = result.candidate("same_file"), result.candidate("savedmodel")
    assert result.baseline.num_threads == 1  # the champion's, as recorded on its version
    # like for like with the champion in its runtime, not a choice of its own
    assert same.num_threads == 1
    assert "same_file: 1 thread(s), as the champion in its runtime" in messages
    # TensorFlow's threads are the process's: nothing to choose per model
    assert (savedmodel.format, savedmodel.num_threads) == ("savedmodel", None)
