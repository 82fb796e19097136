"""The SavedModel the LiteRT converter reads for a model with lookup tables: outputs pinned to
the signature's shape only where a lookup's unranked result reaches them."""

import collections

import numpy as np
import pytest
import string_models
from string_models import OUT_OF_VOCABULARY, tokens

from optimizer.candidates.litert.constant_tables import litert_source
from optimizer.candidates.litert.convert import convert_to_litert
from optimizer.runtime import load_runner
from optimizer.tf_runtime import import_tensorflow

tf = import_tensorflow()


def _op_counts(tflite_path) -> collections.Counter:
    from ai_edge_litert.interpreter import Interpreter

    return collections.Counter(d["op_name"] for d in
                               Interpreter(model_path=str(tflite_path))._get_ops_details())


def _same_outputs(stock, tflite, length):
    feeds = {"tokens": np.concatenate([tokens(6, length, seed=2),
                                       np.resize(OUT_OF_VOCABULARY, (1, length))])}
    want, got = load_runner(stock)(feeds), load_runner(tflite)(feeds)
    for key, value in want.items():
        assert got[key].shape == value.shape
        np.testing.assert_allclose(got[key], value, rtol=0, atol=1e-6)


def test_a_classifier_converts_to_the_ops_of_a_plain_conversion_with_no_output_reshape(
        tmp_path):
    stock = tmp_path / "stock"
    string_models.keras_string_lookup(stock)
    ours = convert_to_litert(litert_source(stock, tmp_path), tmp_path / "ours.tflite", "fp32")
    plain = tf.lite.TFLiteConverter.from_saved_model(str(stock)).convert()
    (tmp_path / "plain.tflite").write_bytes(plain)
    counts = _op_counts(ours.path)
    assert {"HASHTABLE", "HASHTABLE_FIND", "FULLY_CONNECTED"} <= set(counts)
    assert counts == _op_counts(tmp_path / "plain.tflite")
    assert ours.manifest.signature.outputs[0].shape == (None, 3)
    # its outputs match the stock model's: tests/test_string_pipeline.py (litert_fp32)


def test_a_lookup_straight_to_the_output_is_still_pinned_to_the_signature_shape(tmp_path):
    class Ids(tf.Module):
        def __init__(self):
            super().__init__()
            self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
                tf.constant(string_models.STRING_VOCABULARY),
                tf.range(len(string_models.STRING_VOCABULARY), dtype=tf.int64)), -1)

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.string, name="tokens")])
        def serve(self, words):
            return {"ids": self.table.lookup(words) + 1}

    module = Ids()
    tf.saved_model.save(module, str(tmp_path / "stock"),
                        signatures={"serving_default": module.serve})
    ours = convert_to_litert(litert_source(tmp_path / "stock", tmp_path),
                             tmp_path / "ids.tflite", "fp32")
    assert _op_counts(ours.path)["RESHAPE"] == 1
    assert ours.manifest.signature.outputs[0].shape == (None, 4)
    _same_outputs(tmp_path / "stock", ours.path, 4)


@pytest.mark.parametrize("op, pinned", [("MatMul", False), ("Mean", True)])
def test_an_output_is_pinned_unless_an_op_setting_the_rank_follows_the_lookup(op, pinned):
    from optimizer.candidates.litert.constant_tables import lookup_shaped_outputs

    graph = tf.Graph()
    with graph.as_default():
        table = tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64)
        words = tf.compat.v1.placeholder(tf.string, [None, 2], name="words")
        found = tf.raw_ops.LookupTableFindV2(table_handle=table, keys=words,
                                             default_value=tf.constant(0, tf.int64))
        values = tf.cast(found, tf.float32)
        if op == "MatMul":
            out = tf.matmul(values, tf.ones([2, 3]))
        else:
            out = tf.reduce_mean(values, axis=1)
        side = tf.identity(tf.ones([3]) * 2.0, name="side")
    fetches = [out.name, side.name]
    assert lookup_shaped_outputs(graph.as_graph_def(), fetches) == ({out.name} if pinned
                                                                   else set())
