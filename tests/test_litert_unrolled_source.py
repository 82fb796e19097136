"""LiteRT candidates of recurrent models: converted from the source with its static loops
unrolled, run in ai-edge-litert; a loop that cannot be unrolled skips them with the reason.

Tolerance 1e-5 against the source: the fp32 flatbuffer computes the same float32 products
(measured max |diff| 2e-8 on a bidirectional LSTM, XNNPACK reorders the sums).
"""

from tfopt.optimizer.candidates.build import CandidateSettings, derive_candidates
from tfopt.optimizer.candidates.litert.unrolled_source import UNROLLED_DIR, litert_source
from tfopt.optimizer.model.freeze import freeze
from tfopt.optimizer.runtime import load_runner
from tfopt.optimizer.tf_runtime import import_tensorflow
from tfopt.optimizer.verify.equivalence import compare

tf = import_tensorflow()
ATOL = 1e-5
FP32_ONLY = CandidateSettings(targets=("litert",), litert_flavours=("fp32",))


def test_an_lstm_s_fp32_candidate_converts_and_runs_in_ai_edge_litert(model_dir, tmp_path):
    src = model_dir("keras_lstm")
    made, skipped = derive_candidates(src, freeze(src), tmp_path, FP32_ONLY)

    assert skipped == []
    [candidate] = made
    assert (candidate.label, candidate.runtime) == ("litert_fp32", "ai-edge-litert")
    runner = load_runner(candidate.path)
    assert "XNNPACK" in runner.description
    for batch_size in (1, 4):  # the batch stays dynamic: nothing was fixed to unroll
        report = compare(src, runner, batches=1, batch_size=batch_size)
        assert report.max_abs_diff <= ATOL, report.summary()
    assert (tmp_path / UNROLLED_DIR / "saved_model.pb").is_file()


def test_a_model_without_loops_is_converted_from_its_own_savedmodel(model_dir, tmp_path):
    source = litert_source(model_dir("keras_cnn"), "serving_default", tmp_path)
    assert source.path == model_dir("keras_cnn") and source.kept_loops is None
    assert not (tmp_path / UNROLLED_DIR).exists()


class RepeatNTimes(tf.Module):
    """Writes ``a = a / 2 + 1`` ``n`` times into a TensorArray: ``n`` is an input."""

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                  tf.TensorSpec([], tf.int32, name="n")])
    def __call__(self, x, n):
        def body(i, a, written):
            a = a * 0.5 + 1.0
            return i + 1, a, written.write(i, a)
        _, _, written = tf.while_loop(lambda i, a, w: i < n, body,
                                      [tf.constant(0), x, tf.TensorArray(tf.float32, size=n)])
        return {"y": tf.reduce_sum(written.stack(), axis=0)}


def test_a_loop_that_cannot_be_unrolled_skips_litert_with_one_line_saying_why(tmp_path):
    module = RepeatNTimes()
    src = tmp_path / "repeat"
    tf.saved_model.save(module, str(src), signatures={"serving_default": module.__call__})
    made, skipped = derive_candidates(src, freeze(src), tmp_path / "candidates", FP32_ONLY)

    assert made == []
    [(label, reason)] = [(s.label, s.reason) for s in skipped]
    assert label == "litert_fp32" and "\n" not in reason
    assert "TensorListReserve" in reason  # the converter's own reason
    assert "trip count is data-dependent" in reason and "(from 'n')" in reason
    assert not (tmp_path / "candidates" / "litert_fp32").exists()
