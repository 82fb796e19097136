"""TensorFlow's protos read without TensorFlow: the step's process of a big model starts no
runtime beside its workers (optimizer/model/tf_protos.py)."""

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

READ_WITHOUT_TENSORFLOW = textwrap.dedent("""
    import json, pickle, sys
    from tfopt.optimizer.model.savedmodel import get_signature, read_saved_model_proto, serving_meta_graph
    source, outline_file = sys.argv[1], sys.argv[2]
    graph = serving_meta_graph(read_saved_model_proto(source), source).graph_def
    with open(outline_file, "rb") as f:
        outline = pickle.load(f)
    print(json.dumps({"signature": get_signature(source).to_dict(),
                      "nodes": len(graph.node), "outline_ops": dict(outline.op_counts()),
                      "outline_bytes": outline.size_bytes, "stored": outline.stored,
                      "tensorflow_imported": "tensorflow" in sys.modules}))
""")


def test_a_signature_and_an_outline_are_read_without_importing_tensorflow(model_dir, tmp_path):
    from tfopt.optimizer.model.frozen import FrozenModel
    from tfopt.optimizer.model.savedmodel import (
        get_signature,
        read_saved_model_proto,
        serving_meta_graph,
    )
    from tfopt.optimizer.optimize.worker import outline

    source = model_dir("keras_cnn")
    # the SavedModel's own graph stands in for a frozen one: what is read back is the point
    frozen = FrozenModel(graph_def=serving_meta_graph(read_saved_model_proto(source),
                                                      source).graph_def,
                         signature=get_signature(source))
    outlined = outline(frozen, stored="/somewhere/optimized.pickle")
    with open(tmp_path / "outline.pickle", "wb") as out:
        pickle.dump(outlined, out)
    child = subprocess.run([sys.executable, "-c", READ_WITHOUT_TENSORFLOW, str(source),
                            str(tmp_path / "outline.pickle")], capture_output=True, text=True,
                           cwd=REPO, check=True)
    read = json.loads(child.stdout.strip().splitlines()[-1])
    assert read["tensorflow_imported"] is False
    assert read["signature"] == get_signature(source).to_dict()
    assert read["nodes"] == len(serving_meta_graph(read_saved_model_proto(source),
                                                   source).graph_def.node)
    assert read["outline_ops"] == dict(frozen.op_counts())
    assert read["outline_bytes"] == frozen.size_bytes
    assert read["stored"] == "/somewhere/optimized.pickle"


def test_once_tensorflow_is_imported_its_own_classes_are_used(tmp_path):
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    from tfopt.optimizer.model.signature import SignatureInfo
    from tfopt.optimizer.model.tf_protos import graph_def_from_bytes, saved_model_class
    from tfopt.optimizer.optimize.worker import OutlinedModel

    assert saved_model_class() is saved_model_pb2.SavedModel
    graph = graph_pb2.GraphDef()
    graph.node.add(name="x", op="Placeholder")
    assert type(graph_def_from_bytes(graph.SerializeToString())) is graph_pb2.GraphDef
    model = OutlinedModel(graph_def=graph, signature=SignatureInfo(name="s", inputs=(),
                                                                   outputs=()))
    again = pickle.loads(pickle.dumps(model))
    assert type(again.graph_def) is graph_pb2.GraphDef and again.graph_def == graph
