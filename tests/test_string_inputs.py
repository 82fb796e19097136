"""String inputs: generated from the model's own vocabulary (with tokens out of it), fed the
same way by every runtime, read from labelled data, and compared output for output."""

import numpy as np
import pytest
import string_models
from string_models import INTEGER_VOCABULARY, STRING_VOCABULARY, tokens

from tfopt.optimizer.candidates.litert.constant_tables import litert_source
from tfopt.optimizer.candidates.litert.convert import convert_to_litert
from tfopt.optimizer.inputs.generated import OUT_OF_VOCABULARY_SHARE, make_inputs
from tfopt.optimizer.inputs.vocabulary import infer_vocabularies, saved_model_vocabularies
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.tf_runtime import import_tensorflow
from tfopt.optimizer.verify.equivalence import compare
from tfopt.optimizer.verify.evaluation import load_labelled_data

tf = import_tensorflow()


@pytest.fixture(scope="module")
def lookup(tmp_path_factory):
    """(stock SavedModel, its frozen graph, that graph written) of a StringLookup model."""
    root = tmp_path_factory.mktemp("strings")
    string_models.keras_string_lookup(root / "stock")
    frozen = freeze(root / "stock")
    return root / "stock", frozen, write_saved_model(frozen, root / "frozen")


def _signature(*specs) -> SignatureInfo:
    return SignatureInfo("serving_default", tuple(specs), ())


def test_tokens_come_from_the_vocabulary_with_a_share_out_of_it():
    vocabulary = np.array([b"x", b"y", b"z"], dtype=object)
    spec = TensorSpecInfo("words", "words:0", "string", (None, 50))
    words = make_inputs(_signature(spec), 40, seed=1, vocabularies={"words": vocabulary})["words"]
    assert words.shape == (40, 50) and words.dtype == object
    known = np.isin(words, vocabulary)
    assert abs((1 - known.mean()) - OUT_OF_VOCABULARY_SHARE) < 0.03
    assert b"" in set(words[~known].tolist())  # the empty string is among the unknown
    # Without a vocabulary every string is made up; with an integer one, ids come from it.
    assert not np.isin(make_inputs(_signature(spec), 4)["words"], vocabulary).any()
    ids = TensorSpecInfo("ids", "ids:0", "int64", (None, 20))
    drawn = make_inputs(_signature(ids), 30, vocabularies={"ids": np.array([3, 700, -5])})["ids"]
    assert drawn.dtype == np.int64 and {3, 700, -5} <= set(drawn.ravel().tolist())
    assert (drawn[~np.isin(drawn, [3, 700, -5])] > 700).all()


def test_the_vocabulary_is_found_in_the_frozen_graph_and_on_disk(lookup):
    stock, frozen, written = lookup
    expected = {t.encode() for t in STRING_VOCABULARY}
    found = infer_vocabularies(frozen.graph_def, frozen.signature)
    assert set(found) == {"tokens"} and set(found["tokens"].tolist()) == expected
    for path in (written, stock):  # tfopt's frozen SavedModel as is; the stock one frozen first
        on_disk = saved_model_vocabularies([path], "serving_default", frozen.signature)
        assert set(on_disk["tokens"].tolist()) == expected


def test_integer_inputs_that_key_a_table_get_its_keys(tmp_path):
    string_models.keras_integer_lookup(tmp_path / "ids")
    frozen = freeze(tmp_path / "ids")
    found = infer_vocabularies(frozen.graph_def, frozen.signature)
    assert sorted(found["ids"].tolist()) == sorted(INTEGER_VOCABULARY)
    drawn = make_inputs(frozen.signature, 16, vocabularies=found)["ids"]
    assert np.isin(drawn, INTEGER_VOCABULARY).mean() > 0.5


def test_the_equivalence_check_of_a_frozen_lookup_is_exact(lookup):
    stock, frozen, _ = lookup
    report = compare(stock, frozen, batches=2, batch_size=8)
    assert report.max_abs_diff == 0.0 and report.batches == 2


def test_every_runtime_feeds_unicode_bytes_and_object_arrays_alike(lookup, tmp_path):
    stock, frozen, written = lookup
    tflite = convert_to_litert(litert_source(stock, tmp_path), tmp_path / "m.tflite", "fp32")
    from tfopt.optimizer.candidates.onnx.convert import convert_to_onnx

    onnx_model = convert_to_onnx(stock, tmp_path / "m.onnx", "fp32").path
    words = tokens(4, 5, seed=6)
    words[0, :3] = ["tök", "日本", "a b"]  # in the vocabulary, non-ASCII and with a space
    assert "" in words
    spellings = {"unicode": words, "bytes": np.char.encode(words, "utf-8"),
                 "objects": np.vectorize(lambda t: t.encode(), otypes=[object])(words)}
    want = load_runner(stock)({"tokens": words})["output_0"]
    for model in (stock, frozen, written, tflite.path, onnx_model):
        runner = load_runner(model)
        for spelling, array in spellings.items():
            got = runner({"tokens": array})["output_0"]
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=f"{model} {spelling}")


def test_string_outputs_compare_element_for_element(tmp_path):
    class Names(tf.Module):
        def __init__(self, names):
            super().__init__()
            self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
                tf.constant([0, 1], tf.int64), tf.constant(names)), default_value="?")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="ids")])
        def serve(self, ids):
            return {"names": self.table.lookup(ids)}

    paths = {}
    for label, names in (("a", ["zero", "one"]), ("b", ["zero", "uno"])):
        module = Names(names)
        tf.saved_model.save(module, str(tmp_path / label),
                            signatures={"serving_default": module.serve})
        paths[label] = tmp_path / label
    same = compare(paths["a"], paths["a"], {"ids": np.array([0, 1, 5], np.int64)})
    assert same.max_abs_diff == 0.0 and same.top1_agreement is None
    differ = compare(paths["a"], paths["b"], {"ids": np.array([0, 1, 5], np.int64)})
    assert differ.max_abs_diff == np.inf and not differ.within(atol=1e-3)


def test_labelled_strings_load_from_npz_and_tfrecord(tmp_path):
    x = np.array([["tök", "b"], ["", "日本"]])
    np.savez(tmp_path / "eval.npz", x=x, y=np.array([0, 1]))
    assert load_labelled_data(tmp_path / "eval.npz").x.tolist() == x.tolist()
    with tf.io.TFRecordWriter(str(tmp_path / "eval.tfrecord")) as writer:
        for row, label in zip(x, (0, 1)):
            features = {"x": tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[t.encode() for t in row])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=features))
                         .SerializeToString())
    signature = _signature(TensorSpecInfo("tokens", "tokens:0", "string", (None, 2)))
    data = load_labelled_data(tmp_path / "eval.tfrecord", signature)
    assert data.x.shape == (2, 2) and data.x[1, 1] == "日本".encode()
    assert data.y.tolist() == [0, 1]
