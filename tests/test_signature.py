"""Serving signatures as plain data: what one step writes, the next reads back unchanged."""

import json

from optimizer.model.signature import SignatureInfo, TensorSpecInfo


def test_a_signature_survives_its_json_round_trip():
    signature = SignatureInfo(
        name="serving_default",
        inputs=(TensorSpecInfo("ids", "serving_default_ids:0", "int32", (None, 10)),
                TensorSpecInfo("anything", "serving_default_anything:0", "float32", None)),
        outputs=(TensorSpecInfo("scores", "Identity:0", "float32", (None, 4)),))

    again = SignatureInfo.from_dict(json.loads(json.dumps(signature.to_dict())))

    assert again == signature
