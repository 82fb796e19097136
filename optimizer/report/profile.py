"""Where the time goes: per-op-type time of one model, from TensorFlow's step stats.

The model's graph runs in a ``tf.compat.v1.Session`` with ``RunOptions(trace_level=FULL_TRACE)``
and each run's ``run_metadata.step_stats`` gives every executed node's compute time. Times are
grouped by the kernel that actually ran, read from the node's timeline label
(``name = _MklNativeFusedConv2D(...)``), so Grappler's and oneDNN's fusions show up as what they
became, and averaged over the traced runs.

The graph comes from: a :class:`FrozenModel` as is; a TF1-style SavedModel (what tfopt writes)
through ``tf.compat.v1.saved_model.loader.load``; a stock TF2 SavedModel through
:func:`tfopt.optimizer.model.freeze.freeze`, since its serving graph is one opaque function call whose inside
step stats do not show. For a stock model the profile is therefore of its frozen graph: the same
kernels, without the variable reads and call overhead the benchmark also timed. Tracing slows
every op a little; read the shares, not the absolute microseconds.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tfopt.optimizer.model.frozen import FrozenModel
from tfopt.optimizer.model.op_scan import DEFAULT_POLICY, ScanPolicy
from tfopt.optimizer.model.savedmodel import (
    DEFAULT_SIGNATURE,
    read_saved_model_proto,
    serving_meta_graph,
)
from tfopt.optimizer.records import JsonRecord

_LABEL_OP = re.compile(r"^\S+ = ([A-Za-z0-9_]+)\(")


@dataclass(frozen=True)
class OpTime:
    op: str
    micros_per_run: float
    share: float  # of the total traced op time
    nodes: int  # executed nodes of this type per run


@dataclass(frozen=True)
class OpProfile(JsonRecord):
    label: str
    runs: int
    total_micros_per_run: float
    ops: tuple[OpTime, ...]  # largest first
    graph_source: str

    def top(self, n: int) -> tuple[OpTime, ...]:
        return self.ops[:n]


def aggregate_step_stats(step_stats_list, graph_ops: Mapping[str, str] | None = None):
    """``{op type: (total nanoseconds, node executions)}`` over several runs' step stats."""
    graph_ops = graph_ops or {}
    totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for step_stats in step_stats_list:
        for device in step_stats.dev_stats:
            for node in device.node_stats:
                match = _LABEL_OP.match(node.timeline_label)
                op = match.group(1) if match else graph_ops.get(node.node_name, "(runtime)")
                nanos = node.op_end_rel_nanos - node.op_start_rel_nanos
                if nanos <= 0:
                    nanos = (node.op_end_rel_micros - node.op_start_rel_micros) * 1000
                totals[op][0] += max(0, nanos)
                totals[op][1] += 1
    return {op: (t[0], t[1]) for op, t in totals.items()}


def _session_config(tf):
    threading = tf.config.threading
    return tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threading.get_intra_op_parallelism_threads(),
        inter_op_parallelism_threads=threading.get_inter_op_parallelism_threads())


def _open_session(model, signature_name: str, policy: ScanPolicy):
    """``(session, feed tensor names by key, fetch tensor names, how the graph was obtained)``;
    a SavedModel is read under ``policy``."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    source = "frozen graph"
    if not isinstance(model, FrozenModel):
        meta_graph = serving_meta_graph(read_saved_model_proto(model, policy), model)
        if len(meta_graph.object_graph_def.nodes):
            from tfopt.optimizer.model.freeze import freeze

            model = freeze(model, signature_name, policy=policy)
            source = "stock SavedModel, frozen to profile"
        else:
            graph = tf.Graph()
            session = tf.compat.v1.Session(graph=graph, config=_session_config(tf))
            with graph.as_default():
                tags = list(meta_graph.meta_info_def.tags) or [tf.saved_model.SERVING]
                loaded = tf.compat.v1.saved_model.loader.load(session, tags, str(model))
            sig = loaded.signature_def[signature_name]
            return (session, {k: v.name for k, v in sig.inputs.items()},
                    [v.name for _, v in sorted(sig.outputs.items())],
                    "SavedModel serving graph")
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(model.graph_def, name="")
    session = tf.compat.v1.Session(graph=graph, config=_session_config(tf))
    return (session, {s.key: s.tensor_name for s in model.signature.inputs},
            [s.tensor_name for s in model.signature.outputs], source)


def profile_ops(model: FrozenModel | str | os.PathLike, feeds: Mapping[str, np.ndarray],
                label: str = "", runs: int = 10, warmup: int = 2,
                signature_name: str = DEFAULT_SIGNATURE, *,
                policy: ScanPolicy = DEFAULT_POLICY) -> OpProfile:
    """Trace ``runs`` runs of the model on ``feeds`` (``{signature key: array}``); a SavedModel
    is scanned under ``policy`` (:mod:`tfopt.optimizer.model.op_scan`) before it loads."""
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    session, feed_names, fetches, source = _open_session(model, signature_name, policy)
    try:
        graph_ops = {n.name: n.type for n in session.graph.get_operations()}
        feed_dict = {feed_names[k]: np.asarray(v) for k, v in feeds.items()}
        for _ in range(warmup):
            session.run(fetches, feed_dict)
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        traces = []
        for _ in range(runs):
            metadata = tf.compat.v1.RunMetadata()
            session.run(fetches, feed_dict, options=options, run_metadata=metadata)
            traces.append(metadata.step_stats)
    finally:
        session.close()
    totals = aggregate_step_stats(traces, graph_ops)
    grand = sum(t for t, _ in totals.values())
    ops = sorted((OpTime(op, nanos / runs / 1000, nanos / grand if grand else 0.0, count // runs)
                  for op, (nanos, count) in totals.items()),
                 key=lambda o: (-o.micros_per_run, o.op))
    return OpProfile(label=label or str(getattr(model, "source", model)), runs=runs,
                     total_micros_per_run=grand / runs / 1000, ops=tuple(ops),
                     graph_source=source)


def profile_baseline_and_candidate(result, candidate_label: str, feeds: Mapping[str, np.ndarray],
                                   runs: int = 10, *, policy: ScanPolicy = DEFAULT_POLICY
                                   ) -> list[OpProfile]:
    """Profiles of a :class:`BenchmarkResult`'s baseline and one candidate, on ``feeds``; a
    model another runtime than TensorFlow runs has no step stats and is left out. The models
    are read under ``policy``."""
    signature = result.settings.signature
    return [profile_ops(m.path, feeds, label=f"{m.label} ({m.role})", runs=runs,
                        signature_name=signature, policy=policy)
            for m in (result.baseline, result.candidate(candidate_label))
            if m.format == "savedmodel"]
