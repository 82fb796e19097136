"""Refuse a SavedModel that could touch files, the network or Python: a static scan of its ops.

TensorFlow's security policy (SECURITY.md, "TensorFlow models are programs") says a graph may
read and write files and talk to the network with the rights of the process that runs it. A
model pulled from a bucket this pipeline does not control is such a program, so before
TensorFlow imports, loads, optimizes or runs it, :func:`find_dangerous_ops` reads the parsed
``saved_model.pb`` (a protobuf, nothing executed) and names every node whose op type is in
:data:`DENIED_OPS`: every node of every MetaGraph's graph and of every function in its library,
whether a signature reaches it or not (the loader runs initializers and restore functions, and
any library function can be called through the object graph). TF's own ``saved_model_cli
scan`` denies only ReadFile, WriteFile and PrintV2, and only in the top-level graph, where a
TF2 model keeps almost nothing.

The list was drawn from this TensorFlow's op registry (every op whose inputs or attributes name
a file, a path, a directory, a URL or an address, and every op that calls back into Python or
runs a program hidden in a string) and is checked against that registry by the tests. Ops left
out on purpose: ``_Send``/``_Recv`` and collectives (they cross devices or tasks only inside a
cluster this process is not part of), ``Print`` (stderr only), the string-only Summary ops
(``ScalarSummary`` etc. return a serialized proto; only the ``Write*Summary`` family writes),
``ShardedFilename`` (string arithmetic).

A vocabulary table initialized from a text file (``InitializeTableFromTextFile[V2]``) is not a
finding when the file is provably one of the model's own assets (:mod:`tfopt.optimizer.model.assets`:
an ``assets/`` file of this SavedModel, resolved without following links out of it); read from
any other path, or scanned without the model's directory, it is refused.

The loader's own checkpoint machinery is not a finding: a MetaGraph's ``saver_def`` names a save
and a restore node; the graph nodes and library functions reachable from those alone (not from
any other node, signature, collection or object-graph function) are the loader's, and a
checkpoint op among them is accepted when its path inputs derive from the saver's filename
tensor. The same op anywhere else, or writing to a path of the model's choosing, is refused.

:class:`ScanPolicy` says what is accepted: ``allow_ops`` lifts the refusal of named op types
(``security.allow_ops`` / ``--allow-op``), ``extra_denied_ops`` adds site-specific ones, and
the byte limits bound what :mod:`tfopt.optimizer.files.bounded_parse` will parse at all. The policy is an
argument of every function that reads a model, from the entry points down (the CLI builds it
from its flags, a pipeline step from the config's ``security``), and part of the request of
every worker process that reads one; a reader given none applies :data:`DEFAULT_POLICY`, the
strictest. Nothing about it is process-wide state.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tfopt.optimizer.errors import DangerousOpError, TfoptError, shown
from tfopt.optimizer.graph.functional_control_flow import called_functions
from tfopt.optimizer.model.assets import TEXT_FILE_TABLE_OPS, ModelAssets

GIB = 1 << 30
MIB = 1 << 20
# Protobuf refuses to serialize a message over 2 GiB, so no honest saved_model.pb is larger.
DEFAULT_MAX_PB_BYTES = 2 * GIB
DEFAULT_MAX_PARSE_MEMORY_BYTES = 8 * GIB

READS_FILES = "reads files"
WRITES_FILES = "writes files"
LISTS_FILES = "lists files"
NETWORK = "talks to the network"
PYTHON = "calls Python functions of the process that runs it"
HIDDEN_PROGRAM = "runs a program hidden in a string, which no scan can see"
DEBUG_DUMP = "dumps tensors to files or debug servers"
SUMMARY_FILES = "writes TensorBoard event files"
CHECKPOINT = "reads or writes checkpoint files"
FILESYSTEM_CONFIG = "reconfigures the filesystems TensorFlow reaches"

DENIED_OPS: dict[str, str] = {
    # Plain file access.
    "ReadFile": READS_FILES,
    "WriteFile": WRITES_FILES,
    "MatchingFiles": LISTS_FILES,
    "ImmutableConst": READS_FILES,  # memory-maps the file named by memory_region_name
    "FileSystemSetConfiguration": FILESYSTEM_CONFIG,
    # Queue-based readers: their work items are file names.
    "WholeFileReader": READS_FILES, "WholeFileReaderV2": READS_FILES,
    "TextLineReader": READS_FILES, "TextLineReaderV2": READS_FILES,
    "FixedLengthRecordReader": READS_FILES, "FixedLengthRecordReaderV2": READS_FILES,
    "TFRecordReader": READS_FILES, "TFRecordReaderV2": READS_FILES,
    "LMDBReader": READS_FILES,
    "RecordInput": READS_FILES,  # file_pattern attribute
    # Lookup tables, samplers and remapping that read vocabularies or checkpoints.
    "InitializeTableFromTextFile": READS_FILES, "InitializeTableFromTextFileV2": READS_FILES,
    "FixedUnigramCandidateSampler": READS_FILES,  # vocab_file attribute
    "Skipgram": READS_FILES,  # filename attribute
    "GenerateVocabRemapping": READS_FILES,
    "LoadAndRemapMatrix": READS_FILES,
    # tf.data sources and sinks on files, databases or other hosts.
    "TFRecordDataset": READS_FILES, "TFRecordDatasetV2": READS_FILES,
    "FixedLengthRecordDataset": READS_FILES, "FixedLengthRecordDatasetV2": READS_FILES,
    "TextLineDataset": READS_FILES,
    "CSVDataset": READS_FILES, "CSVDatasetV2": READS_FILES, "ExperimentalCSVDataset": READS_FILES,
    "LMDBDataset": READS_FILES, "ExperimentalLMDBDataset": READS_FILES,
    "SqlDataset": READS_FILES, "ExperimentalSqlDataset": READS_FILES,
    "MatchingFilesDataset": LISTS_FILES, "ExperimentalMatchingFilesDataset": LISTS_FILES,
    "CacheDataset": WRITES_FILES, "CacheDatasetV2": WRITES_FILES,  # a non-empty filename
    "SnapshotDataset": WRITES_FILES, "SnapshotDatasetV2": WRITES_FILES,
    "SnapshotDatasetReader": READS_FILES, "SnapshotNestedDatasetReader": READS_FILES,
    "SnapshotChunkDataset": READS_FILES, "ListSnapshotChunksDataset": READS_FILES,
    "SaveDataset": WRITES_FILES, "SaveDatasetV2": WRITES_FILES,
    "LoadDataset": READS_FILES,
    "DatasetToTFRecord": WRITES_FILES, "ExperimentalDatasetToTFRecord": WRITES_FILES,
    "DataServiceDataset": NETWORK, "DataServiceDatasetV2": NETWORK,
    "DataServiceDatasetV3": NETWORK, "DataServiceDatasetV4": NETWORK,
    "RegisterDataset": NETWORK, "RegisterDatasetV2": NETWORK,
    "DistributedSave": NETWORK,
    "DatasetFromGraph": HIDDEN_PROGRAM,
    # Python callbacks: the token names a function registered in the loading process.
    "PyFunc": PYTHON, "PyFuncStateless": PYTHON, "EagerPyFunc": PYTHON,
    "MlirPassthroughOp": HIDDEN_PROGRAM,
    # Checkpoints: accepted only as the loader's own save/restore (see the module docstring).
    "Save": CHECKPOINT, "SaveSlices": CHECKPOINT, "SaveV2": CHECKPOINT,
    "Restore": CHECKPOINT, "RestoreSlice": CHECKPOINT, "RestoreV2": CHECKPOINT,
    "MergeV2Checkpoints": CHECKPOINT, "DTensorRestoreV2": CHECKPOINT,
    # Debugging and calibration dumps.
    "DebugIdentity": DEBUG_DUMP, "DebugIdentityV2": DEBUG_DUMP, "DebugIdentityV3": DEBUG_DUMP,
    "DebugNanCount": DEBUG_DUMP, "DebugNumericSummary": DEBUG_DUMP,
    "DebugNumericSummaryV2": DEBUG_DUMP,
    "DumpTensor": DEBUG_DUMP,
    "CalibrationStatisticsSaver": WRITES_FILES,
    # TensorBoard event files and databases (the string-only *Summary ops are harmless).
    "CreateSummaryFileWriter": SUMMARY_FILES, "CreateSummaryDbWriter": SUMMARY_FILES,
    "WriteSummary": SUMMARY_FILES, "WriteRawProtoSummary": SUMMARY_FILES,
    "WriteScalarSummary": SUMMARY_FILES, "WriteHistogramSummary": SUMMARY_FILES,
    "WriteImageSummary": SUMMARY_FILES, "WriteAudioSummary": SUMMARY_FILES,
    "WriteGraphSummary": SUMMARY_FILES, "ImportEvent": SUMMARY_FILES,
    "FlushSummaryWriter": SUMMARY_FILES, "CloseSummaryWriter": SUMMARY_FILES,
    "StatsAggregatorSetSummaryWriter": SUMMARY_FILES,
    # RPC. Rpc and TryRpc were registered by older TF releases; a custom build may still be.
    "Rpc": NETWORK, "TryRpc": NETWORK,
    "RpcServer": NETWORK, "RpcServerStart": NETWORK, "RpcServerRegister": NETWORK,
    "RpcClient": NETWORK, "RpcCall": NETWORK, "RpcCheckStatus": NETWORK,
    "RpcGetValue": NETWORK, "DeleteRpcFutureResource": NETWORK,
    "RemoteCall": NETWORK,  # runs a function on the device named by its target input
}

CHECKPOINT_PATH_INPUTS: dict[str, tuple[int, ...]] = {
    "SaveV2": (0,), "RestoreV2": (0,), "MergeV2Checkpoints": (0, 1), "Save": (0,),
    "SaveSlices": (0,), "Restore": (0,), "RestoreSlice": (0,), "DTensorRestoreV2": (0,),
}

# PrintV2's output_stream: these print; "file://..." appends to a file.
_PRINT_STREAMS = frozenset({"stderr", "stdout", "log(info)", "log(warning)", "log(error)"})


def _attr_string(node, name: str, default: str) -> str:
    return node.attr[name].s.decode("utf-8", "replace") if name in node.attr else default


def _print_to_file(node) -> str | None:
    stream = _attr_string(node, "output_stream", "stderr")
    return None if stream in _PRINT_STREAMS else f"{WRITES_FILES} (output_stream {stream!r})"


def _descriptor_from_file(node) -> str | None:
    source = _attr_string(node, "descriptor_source", "local://")
    if source == "local://" or source.startswith("bytes://"):
        return None
    return f"{READS_FILES} (descriptor_source {source!r})"


def _debug_copy(node) -> str | None:
    spec = node.attr["debug_ops_spec"].list.s if "debug_ops_spec" in node.attr else []
    return f"{DEBUG_DUMP} (debug_ops_spec)" if len(spec) else None


# Ops that are harmless unless an attribute points them at a file or a debug server.
CONDITIONAL_OPS = {
    "PrintV2": _print_to_file,
    "DecodeProtoV2": _descriptor_from_file,
    "EncodeProto": _descriptor_from_file,
    "Copy": _debug_copy,
    "CopyHost": _debug_copy,
}


class ScanPolicyError(TfoptError):
    """``allow_ops`` names an op type the scan does not deny (most likely a typo)."""


@dataclass(frozen=True)
class ScanPolicy:
    """What a model from outside may hold: op types lifted or added, and parse limits."""

    allow_ops: frozenset[str] = frozenset()
    extra_denied_ops: frozenset[str] = frozenset()
    max_pb_bytes: int = DEFAULT_MAX_PB_BYTES
    max_parse_memory_bytes: int = DEFAULT_MAX_PARSE_MEMORY_BYTES

    @classmethod
    def create(cls, allow_ops: Iterable[str] = (), extra_denied_ops: Iterable[str] = (),
               **limits: int) -> ScanPolicy:
        """A policy whose ``allow_ops`` are all op types it would otherwise refuse."""
        policy = cls(frozenset(allow_ops), frozenset(extra_denied_ops), **limits)
        deniable = sorted(set(DENIED_OPS) | set(CONDITIONAL_OPS) | policy.extra_denied_ops)
        for op in sorted(policy.allow_ops):
            if op not in deniable:
                close = difflib.get_close_matches(op, deniable, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ScanPolicyError(f"cannot allow op '{shown(op)}': the model scan does not "
                                      f"deny it{hint}")
        return policy

    def refusal(self, node) -> str | None:
        """Why ``node`` (a NodeDef) is refused under this policy, or None."""
        op = node.op
        if op in self.allow_ops:
            return None
        if op in self.extra_denied_ops:
            return "is denied by this site's security.extra_denied_ops"
        if op in DENIED_OPS:
            return DENIED_OPS[op]
        check = CONDITIONAL_OPS.get(op)
        return check(node) if check else None


DEFAULT_POLICY = ScanPolicy()

@dataclass(frozen=True)
class Finding:
    op: str
    node: str
    reason: str
    function: str | None = None  # None: a node of the MetaGraph's own graph
    called_from: str | None = None  # the function that calls ``function``, when nested
    meta_graph: str = ""  # its tags, when the SavedModel holds more than one MetaGraph

    def describe(self) -> str:
        if self.function is None:
            where = f"node '{_shown(self.node)}' of the graph"
        else:
            where = f"node '{_shown(self.node)}' in function '{_shown(self.function)}'"
            if self.called_from:
                where += f" (called from '{_shown(self.called_from)}')"
        if self.meta_graph:
            where += f" of MetaGraph [{_shown(self.meta_graph)}]"
        return f"op {_shown(self.op)} at {where} {_shown(self.reason)}"


def _shown(name: str) -> str:
    """A name from the model, safe for a one-line message: escaped and cut short."""
    text = shown(name)
    return text if len(text) <= 120 else text[:117] + "..."


def _node_name(tensor: str) -> str:
    """Graph input/tensor name -> node name: ``^a``, ``a:0`` and ``a`` all name node ``a``."""
    return tensor.lstrip("^").split(":")[0]


def _ancestors(starts: Iterable[str], inputs_of) -> set[str]:
    seen: set[str] = set()
    pending = [s for s in starts]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        pending.extend(_node_name(i) for i in inputs_of(name))
    return seen


class _MetaGraphScan:
    """One MetaGraph: which nodes and functions are the saver's alone, then the findings."""

    def __init__(self, meta_graph, policy: ScanPolicy, label: str, root=None):
        self.policy = policy
        self.label = label
        self._meta_graph, self._root = meta_graph, root
        self._assets: ModelAssets | None = None  # built for the first text-file table only
        graph = meta_graph.graph_def
        self.graph = graph
        self.nodes = {n.name: n for n in graph.node}
        self.library = {f.signature.name: f for f in graph.library.function}
        saver = meta_graph.saver_def
        self.filename_node = _node_name(saver.filename_tensor_name)
        saver_roots = [r for r in (_node_name(saver.save_tensor_name),
                                   _node_name(saver.restore_op_name)) if r in self.nodes]
        saver_nodes = _ancestors(saver_roots, self._graph_inputs) & self.nodes.keys()
        other_roots = {n for n in self.nodes if n not in saver_nodes}
        for signature in meta_graph.signature_def.values():
            for info in (*signature.inputs.values(), *signature.outputs.values()):
                other_roots.add(_node_name(info.name))
        for collection in meta_graph.collection_def.values():
            other_roots.update(_node_name(n) for n in collection.node_list.value)
        other_nodes = _ancestors(other_roots, self._graph_inputs) & self.nodes.keys()
        self.saver_only_nodes = saver_nodes - other_nodes

        saver_functions = self._function_closure(
            f for n in self.saver_only_nodes for f in called_functions(self.nodes[n],
                                                                        self.library))
        other_function_roots = {f for n in other_nodes
                                for f in called_functions(self.nodes[n], self.library)}
        other_function_roots |= {f for f in self.library if f not in saver_functions}
        other_function_roots |= set(meta_graph.object_graph_def.concrete_functions)
        other_function_roots |= {g.gradient_func for g in graph.library.gradient}
        self.callers: dict[str, str] = {}
        other_functions = self._function_closure(other_function_roots, self.callers)
        self.saver_only_functions = saver_functions - other_functions
        self.filename_args = self._filename_args()

    def _graph_inputs(self, name: str):
        node = self.nodes.get(name)
        return node.input if node is not None else ()

    def _function_closure(self, roots: Iterable[str], callers: dict | None = None) -> set[str]:
        seen: set[str] = set()
        pending = list(roots)
        while pending:
            name = pending.pop()
            if name in seen or name not in self.library:
                continue
            seen.add(name)
            for node in self.library[name].node_def:
                for callee in called_functions(node, self.library):
                    if callers is not None and callee not in callers and callee != name:
                        callers[callee] = name
                    pending.append(callee)
        return seen

    def _filename_args(self) -> dict[str, set[str]]:
        """Saver-only function -> its arguments that the saver's graph feeds the filename."""
        args: dict[str, set[str]] = {}
        for name in self.saver_only_nodes:
            node = self.nodes[name]
            data_inputs = [i for i in node.input if not i.startswith("^")]
            for callee in set(called_functions(node, self.library)):
                if callee not in self.saver_only_functions:
                    continue
                input_args = self.library[callee].signature.input_arg
                for arg, tensor in zip(input_args, data_inputs):
                    if _node_name(tensor) == self.filename_node:
                        args.setdefault(callee, set()).add(arg.name)
        return args

    def _loader_checkpoint_op(self, node, inputs_of, filename_names: set[str]) -> bool:
        """A checkpoint op whose every path input derives from the saver's filename."""
        positions = CHECKPOINT_PATH_INPUTS.get(node.op)
        if not positions or not filename_names:
            return False
        data_inputs = [i for i in node.input if not i.startswith("^")]
        return all(p < len(data_inputs)
                   and _ancestors([_node_name(data_inputs[p])], inputs_of) & filename_names
                   for p in positions)

    def _reads_own_asset(self, node, function: str | None = None) -> bool:
        """A text-file table initializer reading one of the model's own assets."""
        if node.op not in TEXT_FILE_TABLE_OPS or node.op in self.policy.extra_denied_ops:
            return False
        if self._assets is None:
            self._assets = ModelAssets(self._meta_graph, self._root)
        return self._assets.own_asset(node, function) is not None

    def findings(self) -> Iterator[Finding]:
        for node in self.graph.node:
            reason = self.policy.refusal(node)
            if reason is None:
                continue
            if (node.name in self.saver_only_nodes and self._loader_checkpoint_op(
                    node, self._graph_inputs, {self.filename_node})):
                continue
            if self._reads_own_asset(node):
                continue
            yield Finding(node.op, node.name, reason, meta_graph=self.label)
        for fname, function in self.library.items():
            by_name = {n.name: n for n in function.node_def}

            def inputs_of(name, by_name=by_name):
                node = by_name.get(name)
                return node.input if node is not None else ()

            for node in function.node_def:
                reason = self.policy.refusal(node)
                if reason is None:
                    continue
                if (fname in self.saver_only_functions and self._loader_checkpoint_op(
                        node, inputs_of, self.filename_args.get(fname, set()))):
                    continue
                if self._reads_own_asset(node, fname):
                    continue
                yield Finding(node.op, node.name, reason, function=fname,
                              called_from=self.callers.get(fname), meta_graph=self.label)


def find_dangerous_ops(saved_model, policy: ScanPolicy = DEFAULT_POLICY,
                       root: str | os.PathLike | None = None) -> list[Finding]:
    """Every node of a parsed ``SavedModel`` proto that ``policy`` refuses, in graph order; []
    when clean. ``root``: the model's directory, without which no table file is proved its own
    asset."""
    several = len(saved_model.meta_graphs) > 1
    found: list[Finding] = []
    for meta_graph in saved_model.meta_graphs:
        label = ",".join(meta_graph.meta_info_def.tags) if several else ""
        found.extend(_MetaGraphScan(meta_graph, policy, label, root).findings())
    return found


def check_saved_model(saved_model, where: str, policy: ScanPolicy = DEFAULT_POLICY,
                      root: str | os.PathLike | None = None) -> None:
    """Raise :class:`DangerousOpError` naming the first refused node, and how many more."""
    found = find_dangerous_ops(saved_model, policy, root)
    if not found:
        return
    first = found[0]
    others = sorted({_shown(f.op) for f in found[1:]} - {_shown(first.op)})
    more = ""
    if len(found) > 1:
        more = f"; {len(found) - 1} more refused node(s)" + (
            f" ({', '.join(others)})" if others else "")
    raise DangerousOpError(
        f"{where}: refused before loading: {first.describe()}{more}. A SavedModel is a program "
        f"that runs with this process's rights; if this model is trusted, allow the op with "
        f"--allow-op {_shown(first.op)} or security.allow_ops")
