"""TensorFlow's protocol buffer classes (``GraphDef``, ``SavedModel``) without importing TensorFlow.

Importing any ``tensorflow.core...._pb2`` module runs ``tensorflow/__init__.py`` first, which
loads the whole runtime: 0.65 GiB resident before a single op runs. The process that drives
``tfopt optimize`` on a big model only reads protos (the source's signature, the outline of the
optimized graph for the report) while its workers freeze, convert and time; with TensorFlow
imported it held those 0.65 GiB beside every worker, most of the step's excess over converting
the model by hand on a small model.

So the classes here are built from the descriptors TensorFlow's generated ``_pb2.py`` files
carry (the serialized ``FileDescriptorProto`` each passes to ``AddSerializedFile``), read as
text from TensorFlow's package directory, into a private descriptor pool: same wire format,
same fields, no TensorFlow. Once TensorFlow is imported in this process anyway, TensorFlow's
own classes are returned instead, so a message read here can be handed to TensorFlow's APIs.
Messages of the private classes cannot be pickled by class (they live in no module): pickle
their bytes (:func:`graph_def_from_bytes`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path

# message full name -> the TensorFlow module that defines it
_MODULES = {
    "tensorflow.GraphDef": "tensorflow.core.framework.graph_pb2",
    "tensorflow.SavedModel": "tensorflow.core.protobuf.saved_model_pb2",
}


def _tensorflow_root() -> Path:
    spec = importlib.util.find_spec("tensorflow")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("tensorflow is not installed")
    return Path(next(iter(spec.submodule_search_locations))).parent


def _serialized_file(proto_name: str) -> bytes:
    """The serialized ``FileDescriptorProto`` in the generated module of ``proto_name``
    (``tensorflow/core/framework/graph.proto``)."""
    source = (_tensorflow_root() / proto_name.replace(".proto", "_pb2.py")).read_text()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile"
                and node.args and isinstance(node.args[0], ast.Constant)):
            return node.args[0].value
    raise ValueError(f"no serialized descriptor in the generated module of {proto_name}")


@functools.cache
def _private_pool():
    from google.protobuf import descriptor_pool

    return descriptor_pool.DescriptorPool()


def _add_file(pool, proto_name: str, added: set[str]) -> None:
    """``proto_name`` and its imports (first) into ``pool``."""
    from google.protobuf import descriptor_pb2

    if proto_name in added:
        return
    file = descriptor_pb2.FileDescriptorProto.FromString(_serialized_file(proto_name))
    for dependency in file.dependency:
        if dependency.startswith("google/protobuf/") and dependency not in added:
            # protobuf's well-known types ship with protobuf itself
            pool.AddSerializedFile(_well_known(dependency))
            added.add(dependency)
        else:
            _add_file(pool, dependency, added)
    pool.Add(file)
    added.add(proto_name)


def _well_known(proto_name: str) -> bytes:
    from google.protobuf import descriptor_pb2, descriptor_pool

    importlib.import_module(proto_name.removesuffix(".proto").replace("/", ".") + "_pb2")
    file = descriptor_pool.Default().FindFileByName(proto_name)
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return proto.SerializeToString()


@functools.cache
def _private_class(full_name: str):
    from google.protobuf import message_factory

    module = _MODULES[full_name]
    proto_name = module.replace(".", "/").removesuffix("_pb2") + ".proto"
    pool = _private_pool()
    _add_file(pool, proto_name, _added_files)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


_added_files: set[str] = set()


def message_class(full_name: str):
    """The class of the TensorFlow message ``full_name`` (``tensorflow.GraphDef``):
    TensorFlow's own when TensorFlow is imported already, else one built without it."""
    if "tensorflow" in sys.modules:
        module = importlib.import_module(_MODULES[full_name])
        return getattr(module, full_name.rsplit(".", 1)[1])
    return _private_class(full_name)


def saved_model_class():
    """``tensorflow.core.protobuf.saved_model_pb2.SavedModel`` or its TF-free twin."""
    return message_class("tensorflow.SavedModel")


def graph_def_from_bytes(data: bytes):
    """A ``GraphDef`` parsed from ``data`` (see :func:`message_class`)."""
    return message_class("tensorflow.GraphDef").FromString(data)
