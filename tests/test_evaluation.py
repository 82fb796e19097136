"""Accuracy on labelled data: .npz or TFRecord input, a registry of metrics by name."""

import numpy as np
import pytest
from benchmark_testing import dense_stack

from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.model.savedmodel import get_signature
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.tf_runtime import import_tensorflow
from tfopt.optimizer.verify.evaluation import (
    METRICS,
    LabelledData,
    check_labels_fit,
    evaluate,
    get_metric,
    load_labelled_data,
    predict,
    register_metric,
    top1_accuracy,
)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return dense_stack(tmp_path_factory.mktemp("eval") / "mlp", layers=2, width=16)


def write_tfrecord(path, x, y, x_key="x"):
    tf = import_tensorflow()
    with tf.io.TFRecordWriter(str(path)) as writer:
        for row, label in zip(x, y):
            feature = {
                x_key: tf.train.Feature(float_list=tf.train.FloatList(value=row.ravel())),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())


def test_top1_and_mse_are_registered_with_their_direction():
    assert METRICS["top1"].higher_is_better is True
    assert METRICS["mse"].higher_is_better is False
    scores = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    assert METRICS["top1"].fn(scores, np.array([1, 0, 0])) == pytest.approx(2 / 3)
    assert METRICS["mse"].fn(np.array([[1.0], [3.0]]), np.array([2.0, 3.0])) == 0.5
    assert METRICS["mae"].fn(np.array([1.0, 3.0]), np.array([2.0, 5.0])) == 1.5


def test_top1_of_a_taggers_per_position_scores_counts_positions_against_per_position_labels():
    # 2 sequences of 3 positions, 2 tags: the argmax per position is [[1, 0, 1], [0, 0, 1]]
    scores = np.array([[[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]],
                       [[0.6, 0.4], [0.9, 0.1], [0.2, 0.8]]])
    labels = np.array([[1, 0, 0], [0, 1, 1]])
    assert METRICS["top1"].fn(scores, labels) == pytest.approx(4 / 6)


def test_top1_with_one_label_per_row_for_per_position_scores_is_one_line_naming_the_shapes():
    scores = np.zeros((4, 20, 10))
    with pytest.raises(InvalidInputsError, match=r"y of shape \(4,\)\) do not match the model's "
                                                 r"top-1 predictions \(shape \(4, 20\)\)"):
        METRICS["top1"].fn(scores, np.zeros(4, dtype=np.int64))


def _signature_with_output(shape):
    return SignatureInfo("serving_default",
                         (TensorSpecInfo("x", "x:0", "float32", (None, 4)),),
                         (TensorSpecInfo("scores", "Identity:0", "float32", shape),))


def _labels(y):
    return LabelledData(x=np.zeros((len(y), 4), np.float32), y=np.asarray(y), source="eval.npz")


@pytest.mark.parametrize("output, y, metric", [
    ((None, 10), np.zeros(6, np.int64), "top1"),  # a classifier: one label per row
    ((None, 10), np.zeros((6, 1), np.int64), "top1"),
    ((None, 20, 10), np.zeros((6, 20), np.int64), "top1"),  # a tagger: one per position
    ((None, 1), np.zeros(6), "mse"),
    ((None, 3), np.zeros((6, 3)), "mae"),
])
def test_labels_that_the_metric_scores_against_the_output_pass_the_check(output, y, metric):
    check_labels_fit(_labels(y), _signature_with_output(output), metric)


@pytest.mark.parametrize("output, y, metric, counts", [
    ((None, 20, 10), np.zeros(6, np.int64), "top1", "it scores 20 label(s) per row, y has 1"),
    ((None, 10), np.zeros((6, 20), np.int64), "top1", "it scores 1 label(s) per row, y has 20"),
    ((None, 3), np.zeros(6), "mse", "it scores 3 label(s) per row, y has 1"),
])
def test_labels_the_metric_cannot_score_are_one_line_naming_both_shapes(output, y, metric, counts):
    with pytest.raises(InvalidInputsError) as refused:
        check_labels_fit(_labels(y), _signature_with_output(output), metric)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"eval.npz: the labels (y of shape {y.shape}) do not fit the "
                              f"model's output scores: float32(")
    assert f"for metric {metric}: {counts}" in message


def test_outputs_without_static_row_shape_and_metrics_that_do_not_say_are_not_checked():
    y = np.zeros((6, 7), np.int64)
    check_labels_fit(_labels(y), _signature_with_output((None, None, 10)), "top1")
    check_labels_fit(_labels(y), _signature_with_output(None), "top1")

    @register_metric("test_unchecked", True, "a metric that does not say what it scores")
    def unchecked(scores, labels):
        return 0.0

    try:
        check_labels_fit(_labels(y), _signature_with_output((None, 10)), "test_unchecked")
    finally:
        del METRICS["test_unchecked"]


def test_loading_with_the_signature_and_metric_checks_the_labels(classifier, tmp_path):
    signature = get_signature(classifier)
    rows = signature.inputs[0].shape[1]
    path = tmp_path / "per_position.npz"
    np.savez(path, x=np.zeros((5, rows), np.float32), y=np.zeros((5, 3), np.int64))
    assert load_labelled_data(path, signature).y.shape == (5, 3)  # no metric: not checked
    with pytest.raises(InvalidInputsError, match="do not fit the model's output"):
        load_labelled_data(path, signature, "top1")


def test_a_metric_can_be_registered_by_name():
    @register_metric("test_top2", True, "label among the two highest scores")
    def top2(scores, labels):
        return float(np.mean([lab in np.argsort(s)[-2:] for s, lab in zip(scores, labels)]))

    try:
        assert get_metric("test_top2").fn(np.array([[0.5, 0.3, 0.2]]), np.array([1])) == 1.0
    finally:
        del METRICS["test_top2"]


def test_unknown_metric_names_the_available_ones():
    with pytest.raises(InvalidInputsError, match="unknown metric 'f7'; available: mae, mse, top1"):
        get_metric("f7")


def test_npz_with_x_and_y(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, x=np.zeros((5, 3), np.float32), y=np.arange(5))
    data = load_labelled_data(path)
    assert data.x.shape == (5, 3) and list(data.y) == [0, 1, 2, 3, 4] and len(data) == 5


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((2, 3))}, "needs arrays 'x' and 'y'; found x"),
    ({"x": np.zeros((2, 3)), "y": np.zeros(3)}, "x has 2 rows but y has 3"),
])
def test_bad_npz_is_named(tmp_path, arrays, message):
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    with pytest.raises(InvalidInputsError, match=message):
        load_labelled_data(path)


def test_a_file_that_is_neither_npz_nor_tfrecord(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("1,2,3\n")
    with pytest.raises(InvalidInputsError, match="not an .npz file, nor a TFRecord"):
        load_labelled_data(path)
    with pytest.raises(InvalidInputsError, match="no such evaluation data file"):
        load_labelled_data(tmp_path / "missing.npz")


def test_tfrecord_examples_are_reshaped_to_the_signature_input(model_dir, tmp_path):
    signature = get_signature(model_dir("keras_cnn"))  # image: (None, 16, 16, 3)
    rng = np.random.default_rng(0)
    x = rng.random((4, 16, 16, 3)).astype(np.float32)
    path = tmp_path / "eval.tfrecord"
    write_tfrecord(path, x, [3, 1, 4, 1])
    data = load_labelled_data(path, signature)
    assert data.x.shape == (4, 16, 16, 3)
    np.testing.assert_array_equal(data.x, x)
    assert list(data.y) == [3, 1, 4, 1]


def test_tfrecord_whose_x_does_not_fit_the_input_shape(model_dir, tmp_path):
    path = tmp_path / "eval.tfrecord"
    write_tfrecord(path, np.zeros((2, 10), np.float32), [0, 1])
    with pytest.raises(InvalidInputsError, match="10 values, which do not fit"):
        load_labelled_data(path, get_signature(model_dir("keras_cnn")))


def test_tfrecord_without_the_features(tmp_path):
    path = tmp_path / "eval.tfrecord"
    write_tfrecord(path, np.zeros((2, 4), np.float32), [0, 1], x_key="pixels")
    with pytest.raises(InvalidInputsError, match="needs features 'x' and 'y'; found pixels, y"):
        load_labelled_data(path)


def test_evaluate_scores_the_models_outputs_against_the_labels(classifier, tmp_path):
    runner = load_runner(classifier)
    x = np.random.default_rng(1).standard_normal((150, 16)).astype(np.float32)
    scores = predict(runner, x, batch_size=64)  # three batches, the last one short
    assert scores.shape == (150, 4)
    own_labels = np.argmax(scores, axis=-1)
    path = tmp_path / "data.npz"
    np.savez(path, x=x, y=own_labels)
    data = load_labelled_data(path)
    assert evaluate(runner, data, "top1") == 1.0
    assert top1_accuracy(runner, x, (own_labels + 1) % 4) == 0.0
    shifted = type(data)(x=x, y=scores + 0.5, source="shifted")
    assert evaluate(runner, shifted, "mse") == pytest.approx(0.25)


def test_a_tagger_is_evaluated_position_by_position_against_its_per_position_labels(tmp_path):
    """A sequence tagger's output is [rows, positions, tags] and its labels [rows, positions]:
    the gate's evaluation scores every position (a BiLSTM tagger stopped it before)."""
    import_tensorflow()
    import keras

    keras.utils.set_random_seed(0)
    ids = keras.Input((5,), dtype="int32", name="token_ids")
    tags = keras.layers.Dense(3)(keras.layers.Embedding(20, 4)(ids))
    keras.Model(ids, tags).export(str(tmp_path / "tagger"), verbose=False)
    runner = load_runner(tmp_path / "tagger")
    x = np.random.default_rng(2).integers(0, 20, size=(70, 5)).astype(np.int32)
    predicted = np.argmax(predict(runner, x), axis=-1)
    labels = predicted.copy()
    labels[:7, 0] = (labels[:7, 0] + 1) % 3  # 7 of 350 positions wrong
    path = tmp_path / "tags.npz"
    np.savez(path, x=x, y=labels)
    assert evaluate(runner, load_labelled_data(path), "top1") == pytest.approx(343 / 350)
