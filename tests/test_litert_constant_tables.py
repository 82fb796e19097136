"""The SavedModel the LiteRT converter reads for a model with lookup tables: outputs pinned to
the signature's shape only where a lookup's unranked result reaches them, and the index map
between a lookup and its embedding folded into the table, exactly."""

import collections

import numpy as np
import pytest
import string_models
from string_models import OUT_OF_VOCABULARY, tokens

from tfopt.optimizer.candidates.litert.constant_tables import litert_source
from tfopt.optimizer.candidates.litert.convert import convert_to_litert
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.tf_runtime import import_tensorflow

tf = import_tensorflow()


def _op_counts(tflite_path) -> collections.Counter:
    from ai_edge_litert.interpreter import Interpreter

    return collections.Counter(d["op_name"] for d in
                               Interpreter(model_path=str(tflite_path))._get_ops_details())


def _same_outputs(stock, tflite, length, input_key="tokens"):
    feeds = {input_key: np.concatenate([tokens(6, length, seed=2),
                                             np.resize(OUT_OF_VOCABULARY, (1, length))])}
    want, got = load_runner(stock)(feeds), load_runner(tflite)(feeds)
    for key, value in want.items():
        assert got[key].shape == value.shape
        np.testing.assert_allclose(got[key], value, rtol=0, atol=1e-6)


def test_a_classifier_converts_to_a_plain_conversions_ops_less_the_embeddings_index_fix(
        tmp_path):
    stock = tmp_path / "stock"
    string_models.keras_string_lookup(stock)
    ours = convert_to_litert(litert_source(stock, tmp_path), tmp_path / "ours.tflite", "fp32")
    plain = tmp_path / "plain.tflite"
    plain.write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(stock)).convert())
    counts, plain_counts = _op_counts(ours.path), _op_counts(plain)
    assert {"HASHTABLE", "HASHTABLE_FIND", "GATHER", "FULLY_CONNECTED"} <= set(counts)
    # the Embedding's negative-id fix is in the table's values; nothing else differs (no
    # RESHAPE on the output either)
    assert plain_counts - counts == collections.Counter(["LESS", "ADD", "SELECT_V2"])
    assert not counts - plain_counts
    assert ours.manifest.signature.outputs[0].shape == (None, 3)
    feeds = {"tokens": np.concatenate([tokens(6, 5, seed=4),
                                       np.resize(OUT_OF_VOCABULARY, (2, 5))])}
    # the same rows gathered: bit for bit the plain conversion's outputs
    np.testing.assert_array_equal(load_runner(ours.path)(feeds)["output_0"],
                                  load_runner(plain)(feeds)["output_0"])
    _same_outputs(stock, ours.path, 5)


def test_an_asset_vocabularys_out_of_vocabulary_fix_goes_into_the_table(tmp_path):
    stock = tmp_path / "stock"
    string_models.asset_vocabulary_lookup(stock)
    ours = convert_to_litert(litert_source(stock, tmp_path), tmp_path / "ours.tflite", "fp32")
    counts = _op_counts(ours.path)
    assert {"HASHTABLE_FIND", "GATHER"} <= set(counts)
    assert not {"LESS", "SELECT_V2"} & set(counts)  # tf.where(ids < 0, size, ids), folded
    _same_outputs(stock, ours.path, 3, input_key="words")


def test_an_index_map_is_kept_when_the_ids_are_read_elsewhere_or_gathered_apart():
    from tfopt.optimizer.graph.lookup_gathers import fold_index_map_into_table

    def graph(case: str):
        graph = tf.Graph()
        with graph.as_default():
            table = tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64)
            words = tf.compat.v1.placeholder(tf.string, [None, 2], name="words")
            found = tf.raw_ops.LookupTableFindV2(table_handle=table, keys=words,
                                                 default_value=tf.constant(-1, tf.int64))
            ids = tf.where(found < 0, tf.constant(3, tf.int64), found)
            if case == "cast":
                ids = tf.cast(ids, tf.int32)
            embedding = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
            outputs = [tf.gather(embedding, ids if case != "apart" else ids + 1)]
            if case == "apart":
                outputs.append(tf.gather(embedding, ids))
            if case == "read":
                outputs.append(tf.identity(ids, name="ids"))
        return graph.as_graph_def(), found.op.name, [t.name for t in outputs]

    for case in ("folded", "cast"):
        graph_def, find, fetches = graph(case)
        folded = fold_index_map_into_table(graph_def, find, np.array([2, 0, 1]), fetches)
        assert folded is not None
        # the table keeps its int64 values, which the gather then takes
        assert folded.values.dtype == np.int64
        np.testing.assert_array_equal(folded.values, [2, 0, 1])
        ops = collections.Counter(n.op for n in folded.graph_def.node)
        assert ops["Less"] == ops["SelectV2"] == ops["Cast"] == 0 and ops["GatherV2"] == 1
        [default] = [n for n in folded.graph_def.node
                     if n.name.endswith("folded_table/default")]
        assert int(tf.make_ndarray(default.attr["value"].tensor)) == 3  # the miss's row
    graph_def, find, fetches = graph("out of range")
    assert fold_index_map_into_table(graph_def, find, np.array([2, 0, 7]), fetches) is None
    for case in ("apart", "read"):
        graph_def, find, fetches = graph(case)
        assert fold_index_map_into_table(graph_def, find, np.array([2, 0, 1]), fetches) is None


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
    from tfopt.optimizer.candidates.litert.constant_tables import lookup_shaped_outputs

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
