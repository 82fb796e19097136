"""Which files a SavedModel's vocabulary tables read: its own ``assets/``, or anything else.

``InitializeTableFromTextFile[V2]`` fills a lookup table from a text file, one key a line. Keras'
``StringLookup`` given a vocabulary file, TF Transform's ``tft.vocabulary`` and every TFX
preprocessing graph export it that way, with the file among the SavedModel's assets; the same op
pointed at ``/etc/passwd`` reads that file instead. The model scan (:mod:`tfopt.optimizer.model.op_scan`)
therefore accepts the op only when :meth:`ModelAssets.own_asset` proves the file name it reads is
one of the model's own assets:

- the file name input comes (through Identity) from a tensor the MetaGraph lists as an asset:
  ``asset_file_def``, or TF1's ``saved_model_assets`` collection, whose tensor the loader feeds
  with the asset's path before it runs the init op;
- or, inside a library function (TF2), from an argument that the object graph binds to an
  ``asset`` object (the concrete function's ``bound_inputs``) and that every call of the
  function in the graph feeds from such a tensor, or from the resource variable TF2 keeps the
  asset path in for TF1 loaders (assigned from the asset tensor only);
- and the asset's recorded file name, joined to ``assets/`` as TensorFlow's loader joins it (an
  absolute name replaces the directory, ``..`` climbs out), names a regular file whose real path,
  links resolved, is inside the model's own ``assets/`` directory.

Anything else (a constant path, an argument some caller feeds from elsewhere, an asset whose
name or link leads out of the model) is left to the scan to refuse. Without the model's
directory nothing can be proved, and the op is refused as before.
"""

from __future__ import annotations

import os
from pathlib import Path

from tfopt.optimizer.graph.names import node_name_from_input, tensor_name

# Text-file table initializers -> the position of their file name input.
TEXT_FILE_TABLE_OPS = {"InitializeTableFromTextFile": 1, "InitializeTableFromTextFileV2": 1}
ASSETS_DIRECTORY = "assets"
LEGACY_ASSETS_COLLECTION = "saved_model_assets"
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
_FORWARDING_OPS = frozenset({"Identity", "Snapshot", "StopGradient"})
_MAX_CALL_DEPTH = 16


def _data_inputs(node) -> list[str]:
    return [i for i in node.input if not i.startswith("^")]


def resolve_asset(root: str | os.PathLike, filename: str) -> Path | None:
    """``root/assets/filename`` when it is a regular file inside the model's ``assets/`` once
    links are resolved; None otherwise."""
    assets = Path(root).resolve() / ASSETS_DIRECTORY
    try:
        real = Path(os.path.join(assets, filename)).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not real.is_relative_to(assets) or not real.is_file():
        return None
    return real


def asset_filenames(meta_graph) -> dict[str, str]:
    """Graph tensor (``node:index``) -> the asset file name it is fed with at load."""
    from tensorflow.core.protobuf import meta_graph_pb2

    found = {tensor_name(a.tensor_info.name): a.filename for a in meta_graph.asset_file_def}
    legacy = meta_graph.collection_def.get(LEGACY_ASSETS_COLLECTION)
    if legacy is not None:
        for packed in legacy.any_list.value:
            asset = meta_graph_pb2.AssetFileDef()
            if packed.Unpack(asset):
                found.setdefault(tensor_name(asset.tensor_info.name), asset.filename)
    return found


class ModelAssets:
    """One MetaGraph of the SavedModel at ``root``: which file name inputs are its assets."""

    def __init__(self, meta_graph, root: str | os.PathLike | None):
        self.root = root
        self.meta_graph = meta_graph
        self.graph = {n.name: n for n in meta_graph.graph_def.node}
        self.library = {f.signature.name: f for f in meta_graph.graph_def.library.function}
        self.bodies = {name: {n.name: n for n in f.node_def} for name, f in self.library.items()}
        self.asset_tensors = asset_filenames(meta_graph)
        self.calls: dict[str, list[tuple[str | None, object]]] = {}
        # (function, argument) -> its asset file names; None while being traced (a call cycle)
        # or when unprovable, so a hostile call graph costs one trace per argument
        self._arguments: dict[tuple[str, int], set[str] | None] = {}
        for node in meta_graph.graph_def.node:
            self._note_call(None, node)
        for fname, function in self.library.items():
            for node in function.node_def:
                self._note_call(fname, node)

    def _note_call(self, where: str | None, node) -> None:
        target = node.op if node.op in self.library else (
            node.attr["f"].func.name if node.op in CALL_OPS and "f" in node.attr else None)
        if target:
            self.calls.setdefault(target, []).append((where, node))

    def own_asset(self, node, function: str | None = None) -> Path | None:
        """The model's own asset file ``node`` (a text-file table initializer of the graph, or
        of library function ``function``) reads (one of them, when its callers feed it
        different ones); None when that cannot be proved for every way it is fed."""
        position = TEXT_FILE_TABLE_OPS.get(node.op)
        if self.root is None or position is None or len(_data_inputs(node)) <= position:
            return None
        names = self._filenames(function, _data_inputs(node)[position], 0)
        if not names:
            return None
        paths = {resolve_asset(self.root, name) for name in names}
        return None if None in paths else min(paths)

    # Each tracer returns the asset file names the tensor may carry, or None when any way it
    # can be fed is not provably an asset.

    def _filenames(self, function: str | None, tensor: str, depth: int) -> set[str] | None:
        if depth > _MAX_CALL_DEPTH:
            return None
        if function is None:
            return self._graph_filenames(tensor, depth)
        body = self.bodies[function]
        args = [a.name for a in self.library[function].signature.input_arg]
        name = tensor.lstrip("^").split(":")[0]
        while name in body and body[name].op in _FORWARDING_OPS and _data_inputs(body[name]):
            name = _data_inputs(body[name])[0].split(":")[0]
        if name not in args:
            return None
        key = (function, args.index(name))
        if key not in self._arguments:
            self._arguments[key] = None
            self._arguments[key] = self._argument_filenames(function, key[1], depth)
        return self._arguments[key]

    def _graph_filenames(self, tensor: str, depth: int) -> set[str] | None:
        tensor = tensor_name(tensor)
        while True:
            if tensor in self.asset_tensors:
                return {self.asset_tensors[tensor]}
            node = self.graph.get(node_name_from_input(tensor))
            if node is None:
                return None
            if node.op in _FORWARDING_OPS and _data_inputs(node):
                tensor = tensor_name(_data_inputs(node)[0])
            elif node.op == "ReadVariableOp" and _data_inputs(node):
                return self._asset_variable(_data_inputs(node)[0], depth)
            else:
                return None

    def _asset_variable(self, handle: str, depth: int) -> set[str] | None:
        """TF2's asset path variable for TF1 loaders: a graph variable whose every use is a
        read, an initialization check, or an assignment of an asset tensor."""
        variable = self.graph.get(node_name_from_input(handle))
        if variable is None or variable.op != "VarHandleOp" or self._shared(variable):
            return None
        names: set[str] = set()
        for node in self.graph.values():
            if variable.name not in {node_name_from_input(i) for i in node.input}:
                continue
            if node.op in ("ReadVariableOp", "VarIsInitializedOp"):
                continue
            data = _data_inputs(node)
            if (node.op != "AssignVariableOp" or len(data) != 2
                    or node_name_from_input(data[1]) == variable.name):
                return None
            assigned = self._graph_filenames(data[1], depth + 1)
            if assigned is None:
                return None
            names |= assigned
        return names or None

    def _shared(self, variable) -> bool:
        """Another VarHandleOp (a graph node or in a function) names the same resource."""
        def key(node):
            return (node.attr["container"].s, node.attr["shared_name"].s or node.name.encode())

        nodes = [*self.graph.values(), *(n for body in self.bodies.values()
                                         for n in body.values())]
        return any(n is not variable and n.op == "VarHandleOp" and key(n) == key(variable)
                   for n in nodes)

    def _argument_filenames(self, function: str, index: int, depth: int) -> set[str] | None:
        names: set[str] = set()
        bound = self.meta_graph.object_graph_def.concrete_functions.get(function)
        captures = list(bound.bound_inputs) if bound is not None else []
        first_capture = len(self.library[function].signature.input_arg) - len(captures)
        if captures and index >= first_capture:
            objects = self.meta_graph.object_graph_def.nodes
            capture = captures[index - first_capture]
            if capture >= len(objects) or objects[capture].WhichOneof("kind") != "asset":
                return None
            obj = objects[capture]
            files = self.meta_graph.asset_file_def
            if obj.asset.asset_file_def_index >= len(files):
                return None
            names.add(files[obj.asset.asset_file_def_index].filename)
        for caller_function, caller in self.calls.get(function, []):
            data = _data_inputs(caller)
            if index >= len(data):
                return None
            fed = self._filenames(caller_function, data[index], depth + 1)
            if fed is None:
                return None
            names |= fed
        return names or None
