""":class:`FrozenModel` -> SavedModel directory with the same serving signature.

The graph is written as a TF1-style SavedModel (tag ``serve``, no variables): TF Serving and
``tf.saved_model.load(dst).signatures[name](**inputs)`` both load it, and the signature keys,
dtypes and shapes are copied from the source signature rather than re-derived from the graph.
A small ``assets.extra/tfopt.json`` records where the model came from and what was done to it;
TF Serving ignores ``assets.extra``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tfopt.optimizer.errors import DestinationError
from tfopt.optimizer.files.atomic import atomic_directory
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo, dtype_enum
from tfopt.optimizer.tf_runtime import import_tensorflow

PROVENANCE_FILE = "assets.extra/tfopt.json"


def _tensor_info(spec: TensorSpecInfo):
    from tensorflow.core.protobuf import meta_graph_pb2

    info = meta_graph_pb2.TensorInfo(name=spec.tensor_name, dtype=dtype_enum(spec.dtype))
    if spec.shape is None:
        info.tensor_shape.unknown_rank = True
    else:
        for dim in spec.shape:
            info.tensor_shape.dim.add().size = -1 if dim is None else dim
    return info


def signature_def(signature: SignatureInfo):
    from tensorflow.core.protobuf import meta_graph_pb2

    sig = meta_graph_pb2.SignatureDef(method_name=signature.method_name)
    for spec in signature.inputs:
        sig.inputs[spec.key].CopyFrom(_tensor_info(spec))
    for spec in signature.outputs:
        sig.outputs[spec.key].CopyFrom(_tensor_info(spec))
    return sig


def write_saved_model(
    model: FrozenModel,
    dst: str | os.PathLike,
    overwrite: bool = False,
    metadata: dict | None = None,
) -> Path:
    tf = import_tensorflow()
    with atomic_directory(dst, overwrite=overwrite) as staging:
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(model.graph_def, name="")
            with tf.compat.v1.Session(graph=graph) as session:
                builder = tf.compat.v1.saved_model.Builder(str(staging))
                builder.add_meta_graph_and_variables(
                    session,
                    [tf.saved_model.SERVING],
                    signature_def_map={model.signature.name: signature_def(model.signature)},
                    strip_default_attrs=True,
                )
                try:
                    builder.save()
                except tf.errors.OpError as exc:
                    # TensorFlow's own file system reports a full disk or a failed write this
                    # way, not as OSError: "<staging path>; No space left on device".
                    reason = exc.message.rsplit("; ", 1)[-1]
                    raise DestinationError(f"cannot write {Path(dst).absolute()}: {reason}"
                                           ) from None
        provenance = {
            "source": model.source,
            "signature": model.signature.name,
            "steps": list(model.history),
            "tensorflow": tf.__version__,
            **(metadata or {}),
        }
        target = staging / PROVENANCE_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    return Path(dst)


def read_provenance(path: str | os.PathLike) -> dict:
    target = Path(path) / PROVENANCE_FILE
    return json.loads(target.read_text()) if target.is_file() else {}
