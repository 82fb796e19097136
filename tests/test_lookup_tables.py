"""Freezing folds the lookup tables a signature only reads into constants and stateless ops.

Each model is a real SavedModel; the frozen graph (and the SavedModel written from it, loaded
both as TF2 and as TF Serving loads it) must give exactly the stock model's outputs, for tokens in
the table and out of it. Tables the signature writes, and TF1 tables living in the graph, are
refused with one line.
"""

import numpy as np
import pytest
import string_models
from string_models import OUT_OF_VOCABULARY, STRING_VOCABULARY, tokens

from tfopt.optimizer.graph.lookup_gathers import ROWS
from tfopt.optimizer.graph.lookup_tables import SCOPE, TableNotFoldable
from tfopt.optimizer.model.export import write_saved_model
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.optimize.flow import optimize, write_optimized
from tfopt.optimizer.optimize.recipe import INFERENCE_RECIPE
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.tf_runtime import import_tensorflow

tf = import_tensorflow()

TABLE_OPS = {"HashTableV2", "LookupTableFindV2", "LookupTableSizeV2", "LookupTableImportV2",
             "InitializeTableFromTextFileV2"}


def _save(module, path):
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


def _assert_same_outputs(stock, other, feeds, atol=0.0):
    want, got = load_runner(stock)(feeds), load_runner(other)(feeds)
    assert want.keys() == got.keys()
    for key in want:
        assert want[key].dtype == got[key].dtype, key
        if atol:
            np.testing.assert_allclose(got[key], want[key], atol=atol, rtol=0)
        else:
            np.testing.assert_array_equal(got[key], want[key])


def _assert_folded(frozen):
    ops = frozen.op_counts()
    assert not TABLE_OPS & set(ops), ops
    resource = [n.name for n in frozen.graph_def.node if n.op == "Placeholder"
                and n.attr["dtype"].type == tf.resource.as_datatype_enum]
    assert resource == []


def _frozen_exactly(module, path, feeds):
    """``module`` saved and frozen: no table left, and the stock model's outputs on ``feeds``."""
    stock = _save(module, path)
    frozen = freeze(stock)
    _assert_folded(frozen)
    _assert_same_outputs(stock, frozen, feeds)
    return frozen


def _string_table():
    values = tf.constant([10 * i + 3 for i in range(len(STRING_VOCABULARY))], tf.int64)
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(STRING_VOCABULARY), values),
        default_value=-7)


class _StringToId(tf.Module):
    def __init__(self, table):
        super().__init__()
        self.table = table

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.string, name="words")])
    def serve(self, words):
        return {"ids": self.table.lookup(words)}


def test_a_string_table_becomes_constants_and_answers_as_the_table_did(tmp_path):
    frozen = _frozen_exactly(_StringToId(_string_table()), tmp_path / "stock",
                             {"words": tokens(6, 4, seed=1)})
    assert frozen.signature.input_keys == ["words"]
    ids = load_runner(frozen)({"words": np.array([OUT_OF_VOCABULARY])})["ids"]
    assert (ids == -7).all()  # every unknown token, the empty string too, gets the default


class _IdToName(tf.Module):
    """int64 ids -> names (strings out), and the table's size."""

    def __init__(self):
        super().__init__()
        keys = tf.constant([-5, 0, 3, 1 << 40, 17], tf.int64)
        names = tf.constant(["minus five", "zero", "three", "big", "seventeen"])
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, names), default_value="?")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="ids")])
    def serve(self, ids):
        return {"names": self.table.lookup(ids), "size": self.table.size() + 0 * tf.size(ids,
                                                                                        tf.int64)}


def test_an_integer_table_with_string_values_and_its_size_fold_exactly(tmp_path):
    feeds = {"ids": np.array([-5, 0, 3, 1 << 40, 17, 4, -1, 1 << 41], np.int64)}
    frozen = _frozen_exactly(_IdToName(), tmp_path / "stock", feeds)
    assert load_runner(frozen)(feeds)["names"][-1] == b"?"


def test_a_vocabulary_table_with_hash_buckets_folds_exactly(tmp_path):
    # StaticVocabularyTable: known tokens by index, unknown ones hashed into 3 more ids.
    table = tf.lookup.StaticVocabularyTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(STRING_VOCABULARY), tf.range(len(STRING_VOCABULARY), dtype=tf.int64)),
        num_oov_buckets=3)
    _frozen_exactly(_StringToId(table), tmp_path / "stock", {"words": tokens(8, 3, seed=2)})


class _LookupInABranch(tf.Module):
    """The lookup inside a cond branch: frozen, it runs in lowered Switch/Merge control flow."""

    def __init__(self):
        super().__init__()
        self.table = _string_table()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words"),
                                  tf.TensorSpec([], tf.bool, name="use_table")])
    def serve(self, words, use_table):
        ids = tf.cond(use_table, lambda: self.table.lookup(words),
                      lambda: tf.zeros_like(words, tf.int64))
        return {"ids": ids}


def test_a_lookup_inside_a_cond_branch_folds_into_that_branch(tmp_path):
    words = tokens(1, 8, seed=3)[0]
    frozen = _frozen_exactly(_LookupInABranch(), tmp_path / "stock",
                             {"words": words, "use_table": np.array(True)})
    assert {"Switch", "Merge"} <= set(frozen.op_counts())
    _assert_same_outputs(tmp_path / "stock", frozen,
                         {"words": words, "use_table": np.array(False)})


class _WritesItsTable(tf.Module):
    def __init__(self):
        super().__init__()
        self.table = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, -1)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words")])
    def serve(self, words):
        self.table.insert(words, tf.ones_like(words, tf.int64))
        return {"ids": self.table.lookup(words)}


def test_a_table_the_signature_writes_is_refused_naming_the_op(tmp_path):
    stock = _save(_WritesItsTable(), tmp_path / "stock")
    with pytest.raises(TableNotFoldable, match="LookupTableInsertV2") as raised:
        freeze(stock)
    assert "\n" not in str(raised.value)


def test_a_tf1_table_in_the_signatures_graph_is_refused_with_what_to_do(tmp_path):
    path = string_models.tf1_lookup_model(tmp_path / "tf1", lambda: (
        tf.compat.v1.lookup.KeyValueTensorInitializer(["a", "b"], tf.constant([1, 2], tf.int64)),
        None))
    with pytest.raises(TableNotFoldable, match="re-export the model with tf.saved_model.save"):
        freeze(path)


KERAS = {
    "string_lookup": (string_models.keras_string_lookup,
                      lambda: {"tokens": tokens(6, 5, seed=4)}),
    "integer_lookup": (string_models.keras_integer_lookup,
                       lambda: {"ids": np.array([[3, 7, 1000, -5], [0, 2, 19, 11],
                                                 [-6, 1001, 3, 3]], np.int64)}),
    "text_vectorization": (string_models.keras_text_vectorization,
                           lambda: {"text": np.array([["The cat sat"], ["a dog, RAN far!"], [""],
                                                      ["unknown words only"]])}),
}


ROUNDING = 1e-6
# table sizes of the models whose lookup only indexes an Embedding
INTO_EMBEDDING = {"string_lookup": len(string_models.STRING_VOCABULARY),
                  "integer_lookup": len(string_models.INTEGER_VOCABULARY)}


@pytest.mark.parametrize("name", sorted(KERAS))
def test_keras_preprocessing_layers_freeze_and_optimize_exactly(name, tmp_path):
    build, feeds = KERAS[name]
    stock = tmp_path / name
    build(stock)
    result = optimize(stock, INFERENCE_RECIPE)
    # the tables fold exactly; the recipe's fold_embedding_projections then folds a pooled
    # Dense into the embedding (string_lookup, text_vectorization), rounding a reordered sum
    assert result.accepted and result.report.max_abs_diff <= ROUNDING, result.report.summary()
    _assert_folded(result.original)
    _assert_folded(result.candidate.model)
    if name in INTO_EMBEDDING:  # the lookup only indexes the Embedding: folded into its rows
        rows = [n for n in result.original.graph_def.node if n.name.endswith(f"/{ROWS}")]
        assert len(rows) == 1
        # a row per key, the search's sentinel position's and the miss's
        assert rows[0].attr["value"].tensor.tensor_shape.dim[0].size == INTO_EMBEDDING[name] + 2
        ops = [n.op for n in result.original.graph_def.node]
        assert ops.count("GatherV2") == 2 and "Less" not in ops  # keys and rows gathers only
        # the search's sentinel needs no clamp; the keys' shape is the signature's, a constant
        search = [n.op for n in result.original.graph_def.node if f"/{SCOPE}/" in n.name]
        assert "LowerBound" in search and not {"Minimum", "Shape"} & set(search)
    optimized = write_optimized(result, tmp_path / "optimized")
    assert not (optimized / "assets").exists() or not any((optimized / "assets").iterdir())
    _assert_same_outputs(stock, optimized, feeds(), atol=ROUNDING)
    # TF Serving's way in: the TF1 loader and a Session, no tf.function.
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(optimized))
        signature = meta_graph.signature_def["serving_default"]
        fed = {signature.inputs[k].name: v for k, v in feeds().items()}
        served = session.run({k: t.name for k, t in signature.outputs.items()}, fed)
    for key, value in load_runner(stock)(feeds()).items():
        np.testing.assert_allclose(served[key], value, atol=ROUNDING, rtol=0)


def test_an_asset_vocabulary_freezes_to_a_model_that_needs_no_asset(tmp_path):
    stock = tmp_path / "asset"
    string_models.asset_vocabulary_lookup(stock)
    assert (stock / "assets").is_dir() and any((stock / "assets").iterdir())
    frozen = freeze(stock)
    _assert_folded(frozen)
    written = write_saved_model(frozen, tmp_path / "frozen")
    feeds = {"words": tokens(5, 3, seed=5)}
    _assert_same_outputs(stock, written, feeds)
    loaded = tf.saved_model.load(str(written)).signatures["serving_default"]
    np.testing.assert_array_equal(loaded(words=tf.constant(feeds["words"]))["scores"].numpy(),
                                  load_runner(stock)(feeds)["scores"])
