"""What a candidate graph costs, in seconds: measured end to end, or summed from per-op timings.

The search ranks many candidate graphs, so it needs a cost that is cheap to ask for and that
orders graphs the way their real latency does. Two costs share one interface (``name`` and
``cost(graph_def) -> seconds``):

- :class:`MeasuredCost` runs the whole graph in a session on generated inputs and takes the
  median of a few runs: the truth, but a session per candidate (tens of milliseconds to seconds).
- :class:`OpCostModel` is TASO's cost model: every op is timed once, alone, per key (op type,
  input shapes and dtypes, attrs, the values of small constant inputs) in a graph holding just
  that op, and a graph costs the sum over its ops. A While loop whose trip count the graph's
  constants fix (:mod:`tfopt.optimizer.graph.static_loops`) costs what its body's copies cost once
  unrolled: the model does not see a loop's per-trip machinery, so unrolling alone is about
  even in it (what unrolling enables later is not). Keys are cached in a JSON file, so a graph
  made by a substitution costs only its new keys' timings plus one shape inference. It ignores
  what only the whole graph shows (Grappler's fusions, parallel branches on several cores, cache
  effects between ops); :func:`rank_correlation` tells how well its ranking matches measurements.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from tfopt.optimizer.graph.consts import resolve_through_identity
from tfopt.optimizer.graph.functional_control_flow import WHILE_OPS
from tfopt.optimizer.graph.names import is_control_input, node_name_from_input, output_index
from tfopt.optimizer.inputs.generated import infer_int_ranges, make_inputs
from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.search.op_timer import MAX_CHAINED_COPIES, shared_timer
from tfopt.optimizer.search.timing_cache import TimingCache
from tfopt.optimizer.transforms.timing import median_run_seconds

log = logging.getLogger(__name__)

# Ops that cost nothing at run time: no kernel work, or constants Grappler has already made.
ZERO_COST_OPS = frozenset({"Const", "Identity", "IdentityN", "NoOp", "Placeholder",
                           "PlaceholderWithDefault", "StopGradient", "Snapshot"})
# A small integer constant input is part of the key by value (a Reshape's shape, a ConcatV2's
# axis, a Pad's paddings change what the op does); weights and other constants by shape only.
SMALL_CONST_ELEMENTS = 64
# Consts larger than this are replaced by Placeholders of their shape before shape inference,
# so that importing a graph for its shapes does not copy its weights.
SHAPE_ONLY_CONST_ELEMENTS = 1024
# Ops never run alone: a loop frame's parts (an Enter without its loop crashes the process),
# calls into the function library, which the one-op graph does not carry.
NOT_ALONE_OPS = frozenset({
    "Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond", "RefEnter", "RefExit",
    "RefMerge", "RefSwitch", "RefNextIteration", "ControlTrigger", "_SwitchN", "While",
    "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase", "PartitionedCall",
    "StatefulPartitionedCall"})
# Only ops reading these dtypes are timed alone (no resources, variants, strings).
TIMEABLE_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "int8", "int16",
                             "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"})
CACHE_VERSION = 2
DEFAULT_FALLBACK_SECONDS = 1e-5
# A loop is costed unrolled up to this many copied nodes; a longer one (or one whose trip count
# depends on the inputs) costs the fallback, like any op that cannot be timed.
MAX_COSTED_LOOP_OPS = 100_000


class CostFunction(Protocol):
    """What the search needs of a cost: a name for reports, and seconds for a graph."""

    name: str

    def cost(self, graph_def) -> float: ...


def default_cache_path() -> Path:
    """``$TFOPT_OP_COST_CACHE``, else ``~/.cache/tfopt/op_costs.json``."""
    env = os.environ.get("TFOPT_OP_COST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tfopt" / "op_costs.json"


def _tensor(name: str) -> str:
    return name if ":" in name else f"{name}:0"


class MeasuredCost:
    """End-to-end latency: the median of ``runs`` session runs of the graph, after ``warmup``.

    The feeds are made once, from the model's signature and ``seed``, so every candidate runs on
    the same batch; the fetches are the signature's outputs (rules keep those names).
    """

    name = "measured"

    def __init__(self, model: FrozenModel, batch_size: int = 1, runs: int = 15,
                 warmup: int = 3, seed: int = 0):
        self.runs, self.warmup = runs, warmup
        inputs = make_inputs(model.signature, batch_size, seed,
                             infer_int_ranges(model.graph_def, model.signature))
        self.feeds = {_tensor(spec.tensor_name): inputs[spec.key]
                      for spec in model.signature.inputs}
        self.fetches = [_tensor(spec.tensor_name) for spec in model.signature.outputs]

    def cost(self, graph_def) -> float:
        return self.cost_many([graph_def])[0]

    def cost_many(self, graph_defs: Sequence) -> list[float]:
        """Medians for several graphs timed interleaved, so that load hits them alike."""
        return median_run_seconds(graph_defs, self.feeds, self.fetches, self.runs, self.warmup)


class OpCostModel:
    """Sum of per-op times, each op timed once in isolation per key and cached on disk.

    ``timings`` counts the isolated timings this instance ran (cache misses); a second
    ``cost`` of the same graph runs none. Unknown dims of the graph's placeholders become
    ``batch_size`` (the first) or ``unknown_dim`` (the others) before shapes are inferred. An op
    that cannot be timed alone (unknown shapes, control flow, resources, strings) costs
    ``fallback_seconds``, logged at debug level and not written to the cache.

    Ops are timed in a worker process running ``threads`` intra-op threads (0: TensorFlow's
    default, all cores; see :mod:`tfopt.optimizer.search.op_timer` for why a process, and why one
    thread by default); the thread count is part of the cache's machine fingerprint. The
    worker starts at the first cache miss and is shared by every model of the process.
    """

    name = "op-model"

    def __init__(self, cache_path: str | os.PathLike | None = None, batch_size: int = 1,
                 unknown_dim: int = 8, runs: int = 15, warmup: int = 2,
                 fallback_seconds: float = DEFAULT_FALLBACK_SECONDS, seed: int = 0,
                 threads: int = 1):
        self.cache_path = Path(cache_path) if cache_path else default_cache_path()
        self.batch_size, self.unknown_dim = batch_size, unknown_dim
        self.runs, self.warmup = runs, warmup
        self.fallback_seconds = fallback_seconds
        self.seed = seed
        self.timings = 0
        self._timer = shared_timer(threads)
        self.machine = f"{_machine_fingerprint()}; ops timed on {threads or 'all'} thread(s)"
        self._cache = TimingCache(self.cache_path, CACHE_VERSION, self.machine, "op cost")
        self._seconds: dict[str, float] = self._load()
        self._failed: set[str] = set()
        self._loops: dict[str, float] = {}
        self._unsaved = False

    # -- the cost -------------------------------------------------------------------------

    def cost(self, graph_def) -> float:
        return sum(self.op_costs(graph_def).values())

    def op_costs(self, graph_def) -> dict[str, float]:
        """``node name -> seconds`` for every node of the graph (0 for the free ones)."""
        specs = _static_specs(self._shape_graph(graph_def))
        nodes = {n.name: n for n in graph_def.node}
        costs = {}
        for node in graph_def.node:
            if node.op in WHILE_OPS:
                costs[node.name] = self._loop_cost(graph_def, node)
            else:
                costs[node.name] = self._node_cost(node, nodes, specs)
        if self._unsaved:
            self.save()
        return costs

    def _loop_cost(self, graph_def, node) -> float:
        """What the loop's unrolled copies cost (:mod:`tfopt.optimizer.graph.static_loops`): in a
        copy of the body the shapes are known, where the body function's are not (its
        TensorList reads say no shape); the fallback when the trip count is not fixed."""
        from tensorflow.core.framework import graph_pb2

        from tfopt.optimizer.graph.static_loops import (
            UNROLLED_SCOPE,
            NotStatic,
            analyse_loop,
            loop_key,
            unroll_loop,
        )
        from tfopt.optimizer.graph.tensor_lists import simplify_tensor_lists

        key = loop_key(graph_def, node)
        if key not in self._loops:
            try:
                loop = analyse_loop(graph_def, node, MAX_COSTED_LOOP_OPS)
            except NotStatic as reason:
                log.debug("costing loop %s as one op: %s", node.name, reason)
                self._loops[key] = self.fallback_seconds
                return self.fallback_seconds
            unrolled = graph_pb2.GraphDef()
            unrolled.CopyFrom(graph_def)
            unroll_loop(unrolled, loop, frozenset())
            simplify_tensor_lists(unrolled, frozenset())
            copies = f"{node.name}/{UNROLLED_SCOPE}/"
            self._loops[key] = sum(seconds for name, seconds in self.op_costs(unrolled).items()
                                   if name.startswith(copies))
        return self._loops[key]

    def _node_cost(self, node, nodes: dict, specs: dict) -> float:
        if node.op in ZERO_COST_OPS:
            return 0.0
        inputs = [i for i in node.input if not is_control_input(i)]
        consts = [_const_behind(nodes, i) for i in inputs]
        if inputs and all(c is not None for c in consts) and _safe_alone(node.op):
            return 0.0  # Grappler folds a stateless op whose inputs are all constant
        key, timeable = self._key(node, inputs, consts, specs)
        seconds = self._seconds.get(key)
        if seconds is not None:
            return seconds
        if key in self._failed:
            return self.fallback_seconds
        if not timeable:
            log.debug("cannot time %s (%s) alone: unknown input shape or dtype", node.name, key)
        elif not _safe_alone(node.op):
            log.debug("not timing %s (%s) alone: control flow, a call or a stateful op",
                      node.name, key)
        else:
            log.debug("timing %s alone: %s", node.name, key)
            try:
                seconds = self._time_alone(node, inputs, consts, specs)
            except Exception as exc:  # noqa: BLE001 - any op TF refuses to run alone
                log.debug("cannot time %s (%s) alone: %s", node.name, key, exc)
        if seconds is None:
            self._failed.add(key)
            return self.fallback_seconds
        self._seconds[key] = seconds
        self._unsaved = True
        return seconds

    def _key(self, node, inputs: list[str], consts: list, specs: dict) -> tuple[str, bool]:
        """The op's cache key, and whether every input shape is fully known."""
        parts, timeable = [], True
        for inp, const in zip(inputs, consts):
            shape, dtype = specs.get(_tensor(_canonical(inp)), (None, "?"))
            if shape is None or any(d is None for d in shape) or dtype not in TIMEABLE_DTYPES:
                timeable = False
            text = f"{dtype}{list(shape) if shape is not None else '?'}"
            if const is not None:
                if dtype.startswith(("int", "uint")) and _elements(const) <= SMALL_CONST_ELEMENTS:
                    digest = hashlib.sha1(const.attr["value"].tensor.SerializeToString(
                        deterministic=True)).hexdigest()[:12]
                    text += f"=const:{digest}"
                else:
                    text += "=const"
            parts.append(text)
        attrs = hashlib.sha1()
        for name in sorted(node.attr):
            if not name.startswith("_"):
                attrs.update(name.encode())
                attrs.update(node.attr[name].SerializeToString(deterministic=True))
        return f"{node.op}({', '.join(parts)}){{{attrs.hexdigest()[:16]}}}", timeable

    # -- timing one op --------------------------------------------------------------------

    def _time_alone(self, node, inputs: list[str], consts: list, specs: dict) -> float:
        from tensorflow.core.framework import graph_pb2

        from tfopt.optimizer.graph.rewrite import make_const

        tf = _tf()
        rng = np.random.default_rng(self.seed)
        graph_def = graph_pb2.GraphDef()
        op_inputs = []
        for position, (inp, const) in enumerate(zip(inputs, consts)):
            name = f"input_{position}"
            if const is not None:
                copied = graph_def.node.add()
                copied.CopyFrom(const)
                copied.name = name
                copied.device = ""
                del copied.input[:]
            else:
                # A Const behind a PlaceholderWithDefault: the data is in the graph (no feed
                # copied in per run) and, with the graph optimizers off, nothing is folded.
                shape, dtype = specs[_tensor(_canonical(inp))]
                graph_def.node.append(make_const(f"{name}_value", _random(rng, shape, dtype)))
                holder = graph_def.node.add(name=name, op="PlaceholderWithDefault",
                                            input=[f"{name}_value"])
                holder.attr["dtype"].type = tf.as_dtype(dtype).as_datatype_enum
                holder.attr["shape"].shape.CopyFrom(tf.TensorShape(shape).as_proto())
            op_inputs.append(name)
        # Copies of the op chained by control edges run one after another in one session.run,
        # so a fast op's time is not lost in the run's fixed overhead (timed alongside, in the
        # same session, on a NoOp, and subtracted).
        for copy in range(MAX_CHAINED_COPIES):
            alone = graph_def.node.add()
            alone.op, alone.name = node.op, f"op_{copy}"
            alone.input.extend(op_inputs + ([f"^op_{copy - 1}"] if copy else []))
            for attr_name, value in node.attr.items():
                if not attr_name.startswith("_"):
                    alone.attr[attr_name].CopyFrom(value)
        graph_def.node.add(name="nothing", op="NoOp")
        started = time.perf_counter()
        seconds = self._timer.seconds(graph_def, self.runs, self.warmup)
        self.timings += 1
        log.debug("timed %s alone: %.3g s (%.2f s to time)", node.op, seconds,
                  time.perf_counter() - started)
        return seconds

    def _shape_graph(self, graph_def):
        """A copy for shape inference: input dims fixed, large constants as shape-only inputs."""
        from tensorflow.core.framework import graph_pb2

        copy = graph_pb2.GraphDef()
        copy.versions.CopyFrom(graph_def.versions)
        copy.library.CopyFrom(graph_def.library)
        for node in graph_def.node:
            if node.op == "Const" and _elements(node) > SHAPE_ONLY_CONST_ELEMENTS:
                copied = copy.node.add(name=node.name, op="Placeholder")
                copied.attr["dtype"].CopyFrom(node.attr["dtype"])
                copied.attr["shape"].shape.CopyFrom(node.attr["value"].tensor.tensor_shape)
                copied.input.extend(node.input)  # control inputs, if any, stay valid
            else:
                copied = copy.node.add()
                copied.CopyFrom(node)
            if node.op == "Placeholder" and "shape" in node.attr:
                shape = copied.attr["shape"].shape
                if not shape.unknown_rank:
                    for index, dim in enumerate(shape.dim):
                        if dim.size < 0:
                            dim.size = self.batch_size if index == 0 else self.unknown_dim
        return copy

    # -- the cache file -------------------------------------------------------------------

    def _load(self) -> dict[str, float]:
        return self._cache.load()

    def save(self) -> None:
        """Write the cache (:class:`~tfopt.optimizer.search.timing_cache.TimingCache`), merged with
        what another process may have written meanwhile; entries timed here win."""
        self._seconds = self._cache.save(self._seconds)
        self._unsaved = False

    def __len__(self) -> int:
        return len(self._seconds)


def rank_correlation(model_costs: Sequence[float], measured_costs: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their average rank): 1 when the model orders the
    graphs exactly as the measurements do, -1 when exactly backwards; NaN when either side is
    constant or there are fewer than two graphs."""
    a = np.asarray(model_costs, dtype=np.float64)
    b = np.asarray(measured_costs, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"need two equally long lists of costs, got {a.shape} and {b.shape}")
    if a.size < 2:
        return float("nan")
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denominator) if denominator > 0 else float("nan")


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.arange(values.size, dtype=np.float64)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def _tf():
    from tfopt.optimizer.tf_runtime import import_tensorflow

    return import_tensorflow()


def _machine_fingerprint() -> str:
    from tfopt.optimizer.system.cpu_features import cpu_model

    return f"{cpu_model() or 'unknown cpu'}; {os.cpu_count()} cpus; tf {_tf().__version__}"


def _safe_alone(op: str) -> bool:
    """Whether an op may run in a graph of its own: not control flow, not a function call, not
    stateful (queues, variables, iterators keep state a one-op graph cannot give them)."""
    if op in NOT_ALONE_OPS:
        return False
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    return op_def is not None and not op_def.is_stateful


def _canonical(inp: str) -> str:
    return f"{node_name_from_input(inp)}:{output_index(inp)}"


def _const_behind(nodes: dict, inp: str):
    node = resolve_through_identity(nodes, inp)
    return node if node is not None and node.op == "Const" else None


def _elements(const) -> int:
    return int(np.prod([d.size for d in const.attr["value"].tensor.tensor_shape.dim],
                       dtype=np.int64))


def _static_specs(graph_def) -> dict[str, tuple[tuple | None, str]]:
    """``"node:i" -> (shape, dtype name)`` for every tensor; unknown dims are ``None``."""
    tf = _tf()
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    specs = {}
    for op in graph.get_operations():
        for index, tensor in enumerate(op.outputs):
            shape = None if tensor.shape.rank is None else tuple(tensor.shape.as_list())
            specs[f"{op.name}:{index}"] = (shape, tensor.dtype.name)
    return specs


def _random(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    if dtype in ("float16", "float32", "float64"):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == "bool":
        return np.zeros(shape, dtype=bool)
    return np.zeros(shape, dtype=dtype)  # integer zeros: a valid index for any gather
