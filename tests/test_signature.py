"""Serving signatures as plain data: what one step writes, the next reads back unchanged."""

import json

from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo


def test_a_signature_survives_its_json_round_trip():
    signature = SignatureInfo(
        name="serving_default",
        inputs=(TensorSpecInfo("ids", "serving_default_ids:0", "int32", (None, 10)),
                TensorSpecInfo("anything", "serving_default_anything:0", "float32", None)),
        outputs=(TensorSpecInfo("scores", "Identity:0", "float32", (None, 4)),))

    again = SignatureInfo.from_dict(json.loads(json.dumps(signature.to_dict())))

    assert again == signature


def test_the_json_names_the_graph_tensor_tensor_and_puts_the_method_second():
    spec = TensorSpecInfo("ids", "serving_default_ids:0", "int32", (None, 10))
    signature = SignatureInfo(name="serving_default", inputs=(spec,), outputs=(spec,))
    data = signature.to_dict()
    assert list(data) == ["name", "method_name", "inputs", "outputs"]
    assert data["inputs"][0] == {"key": "ids", "tensor": "serving_default_ids:0",
                                 "dtype": "int32", "shape": [None, 10]}
    assert TensorSpecInfo.from_dict(data["inputs"][0]) == spec
