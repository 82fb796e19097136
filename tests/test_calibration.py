"""Calibration inputs need no labels: a file of inputs, else the eval data's, else inputs
generated from the signature, each saying what it is."""

import numpy as np
import pytest

from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.inputs.calibration import (
    Calibration,
    choose_calibration,
    from_rows,
    read_inputs,
)
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo


def signature(*inputs: tuple[str, str, tuple]) -> SignatureInfo:
    return SignatureInfo(
        name="serving_default",
        inputs=tuple(TensorSpecInfo(key, f"{key}:0", dtype, shape)
                     for key, dtype, shape in inputs),
        outputs=(TensorSpecInfo("y", "y:0", "float32", (None, 1)),))


IMAGE = signature(("image", "float32", (None, 2, 2)))
TWO_INPUTS = signature(("ids", "int32", (None, 3)), ("pixels", "float32", (None, 2)))


def write_tfrecord(path, records):
    import tensorflow as tf

    def feature(values):
        values = np.asarray(values).ravel()
        if values.dtype.kind == "i":
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            example = tf.train.Example(features=tf.train.Features(
                feature={name: feature(v) for name, v in record.items()}))
            writer.write(example.SerializeToString())


def rows_of(calibration: Calibration, key: str) -> list[float]:
    return sorted(float(np.asarray(f[key]).ravel()[0]) for f in calibration.feeds)


def test_a_file_of_inputs_only_calibrates_and_is_tagged_data(tmp_path):
    path = tmp_path / "inputs.npz"
    x = np.arange(40, dtype=np.float64).reshape(10, 2, 2)
    np.savez(path, x=x)

    calibration = choose_calibration(IMAGE, samples=4, calibration_data=path)

    assert calibration.tag == "data" and calibration.source == f"calibration data {path}"
    assert len(calibration.feeds) == 4
    assert all(f["image"].shape == (1, 2, 2) and f["image"].dtype == np.float32
               for f in calibration.feeds)
    assert set(rows_of(calibration, "image")) <= set(x[:, 0, 0].tolist())


def test_one_array_per_input_key_draws_the_same_rows_of_every_input(tmp_path):
    path = tmp_path / "inputs.npz"
    ids = np.arange(30).reshape(10, 3)
    np.savez(path, ids=ids, pixels=ids[:, :2] * 10.0)

    calibration = choose_calibration(TWO_INPUTS, samples=5, calibration_data=path)

    for feed in calibration.feeds:
        assert feed["ids"].dtype == np.int32 and feed["ids"].shape == (1, 3)
        assert feed["pixels"].tolist() == [[feed["ids"][0, 0] * 10.0, feed["ids"][0, 1] * 10.0]]


def test_a_tfrecord_of_inputs_is_reshaped_to_each_input(tmp_path):
    path = tmp_path / "inputs.tfrecord"
    write_tfrecord(path, [{"ids": [i, i + 1, i + 2], "pixels": [i / 2, i / 4]}
                          for i in range(6)])

    inputs = read_inputs(path, TWO_INPUTS)

    assert inputs["ids"].shape == (6, 3) and inputs["pixels"].shape == (6, 2)
    assert inputs["ids"][2].tolist() == [2, 3, 4]
    calibration = choose_calibration(TWO_INPUTS, samples=6, calibration_data=path)
    assert rows_of(calibration, "ids") == [0, 1, 2, 3, 4, 5]


def test_calibration_data_wins_over_the_eval_data_whose_labels_are_never_needed(tmp_path):
    inputs, labelled = tmp_path / "inputs.npz", tmp_path / "eval.npz"
    np.savez(inputs, x=np.full((5, 2, 2), 7.0))
    np.savez(labelled, x=np.full((5, 2, 2), 3.0), y=np.zeros(5))

    assert rows_of(choose_calibration(IMAGE, 3, calibration_data=inputs, eval_data=labelled),
                   "image") == [7.0] * 3
    from_eval = choose_calibration(IMAGE, 3, eval_data=labelled)
    assert rows_of(from_eval, "image") == [3.0] * 3
    assert (from_eval.tag, from_eval.source) == ("data", f"eval data {labelled}")


def test_without_any_data_inputs_are_generated_and_tagged_synthetic():
    calibration = choose_calibration(TWO_INPUTS, samples=7)

    assert calibration.synthetic and calibration.tag == "synthetic"
    assert len(calibration.feeds) == 7
    assert all(f["ids"].shape == (1, 3) and f["pixels"].shape == (1, 2)
               for f in calibration.feeds)
    assert len({f["pixels"].tobytes() for f in calibration.feeds}) == 7  # not one row repeated


def test_a_remote_location_is_fetched_and_named_as_given(tmp_path):
    local = tmp_path / "fetched.npz"
    np.savez(local, x=np.ones((3, 2, 2)))
    asked = []

    def fetch(location):
        asked.append(location)
        return local

    calibration = choose_calibration(IMAGE, 2, calibration_data="s3://bucket/inputs.npz",
                                     fetch=fetch)

    assert asked == ["s3://bucket/inputs.npz"]
    assert calibration.source == "calibration data s3://bucket/inputs.npz"


@pytest.mark.parametrize("arrays, sig, message", [
    ({"pixels": np.zeros((4, 2))}, TWO_INPUTS,
     r"calibration data needs one array per input key \(ids, pixels\); found pixels"),
    ({"y": np.zeros(4)}, IMAGE, r"needs 'x' or one array per input key \(image\); found y"),
    ({"x": np.zeros((4, 3, 3))}, IMAGE,
     r"rows of shape \(3, 3\) do not fit input image: float32\(None, 2, 2\)"),
    ({"ids": np.zeros((4, 3)), "pixels": np.zeros((5, 2))}, TWO_INPUTS,
     "the inputs need the same number of rows, at least one; got ids: 4, pixels: 5"),
    ({"x": np.zeros((0, 2, 2))}, IMAGE, "at least one; got image: 0"),
])
def test_inputs_that_do_not_fit_the_signature_are_one_line_errors(tmp_path, arrays, sig,
                                                                  message):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(InvalidInputsError, match=message):
        choose_calibration(sig, 3, calibration_data=path)


def test_a_missing_or_unreadable_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(InvalidInputsError, match="no such calibration data file"):
        choose_calibration(IMAGE, 3, calibration_data=tmp_path / "absent.npz")
    text = tmp_path / "inputs.npz"
    text.write_text("not numpy")
    with pytest.raises(InvalidInputsError, match="not an .npz file, nor a TFRecord"):
        choose_calibration(IMAGE, 3, calibration_data=text)


def test_rows_for_one_input_need_a_single_input_signature():
    with pytest.raises(InvalidInputsError, match="'x' feeds one input; signature "
                                                 "'serving_default' has 2"):
        from_rows(TWO_INPUTS, np.zeros((3, 3)), 2, source="eval data e.npz")


def test_an_unbatched_scalar_input_gets_one_value_per_row(tmp_path):
    sig = signature(("features", "float32", (None, 4)), ("temperature", "float32", ()))
    path = tmp_path / "inputs.npz"
    np.savez(path, features=np.ones((4, 4)), temperature=np.arange(4.0))

    calibration = choose_calibration(sig, 4, calibration_data=path)

    assert all(f["features"].shape == (1, 4) and f["temperature"].shape == ()
               for f in calibration.feeds)
    assert rows_of(calibration, "temperature") == [0.0, 1.0, 2.0, 3.0]
