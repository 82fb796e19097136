"""A SavedModel is published only if it serves the way TF Serving loads it: the TF1 loader in a
Session, tag ``serve``, its signature's tensors run by name. Each broken model here still loads
with ``tf.saved_model.load`` (TF2), which is why the check is needed."""

import shutil

import pytest

from tfopt.optimizer.verify.servability import NotServableError, check_servable


@pytest.fixture
def cnn(model_dir):
    return model_dir("keras_cnn")


def _altered(tmp_path, source, alter):
    from tensorflow.core.protobuf import saved_model_pb2

    copy = tmp_path / "altered"
    shutil.copytree(source, copy)
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((copy / "saved_model.pb").read_bytes())
    alter(proto.meta_graphs[0])
    (copy / "saved_model.pb").write_bytes(proto.SerializeToString())
    return copy


def test_a_keras_savedmodel_loads_and_runs_in_a_tf1_session(cnn):
    outputs = check_servable(cnn, "serving_default")
    assert outputs and all(shape[0] == 1 for shape in outputs.values())


def test_a_model_without_the_serve_tag_is_not_servable_though_tf2_loads_it(cnn, tmp_path):
    import tensorflow as tf

    def retag(meta_graph):
        del meta_graph.meta_info_def.tags[:]
        meta_graph.meta_info_def.tags.append("train")

    altered = _altered(tmp_path, cnn, retag)
    assert tf.saved_model.load(str(altered)).signatures["serving_default"] is not None
    with pytest.raises(NotServableError) as caught:
        check_servable(altered, "serving_default", label="candidate 'x'")
    message = str(caught.value)
    assert "\n" not in message and "candidate 'x'" in message and "serve" in message
    assert NotServableError.exit_code == 8


def test_a_signature_naming_a_missing_tensor_is_not_servable(cnn, tmp_path):
    def break_output(meta_graph):
        output = next(iter(meta_graph.signature_def["serving_default"].outputs.values()))
        output.name = "no_such_tensor:0"

    with pytest.raises(NotServableError, match="no_such_tensor"):
        check_servable(_altered(tmp_path, cnn, break_output), "serving_default")


def test_an_unknown_signature_is_not_servable(cnn):
    with pytest.raises(NotServableError, match="no signature 'nope'"):
        check_servable(cnn, "nope")
