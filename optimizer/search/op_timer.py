"""Time one op alone, in a process of its own: ``python -m tfopt.optimizer.search.op_timer THREADS``.

The op cost model (:class:`tfopt.optimizer.search.cost.OpCostModel`) times each op in a graph of its
own. It does so in a child process because TensorFlow sizes its thread pools once per process:
a session's ``intra_op_parallelism_threads`` does not change the pools of a process where
TensorFlow already ran (measured: after an eager op, a session asking for 1 thread timed a
1x1 conv at the two-thread 25-28 us, not the one-thread 13 us), so only
a process started for it times ops on the thread count asked for. And the count matters on a
shared machine: on two cores a 3x3 conv's (14x14x256, 8 filters) two-thread time took 55 to 123
us over 12 fresh timings under load, 58 to 84 us quiet, while on one thread it stayed within
63-69 us quiet or loaded; a merge whose gain is 10-25% of the pair's cost was ranked a loss in
3 of 23 runs of its test on two threads, and in none of 14 on one.

:class:`OpTimer` starts the worker on first use; :func:`shared_timer` gives the one a process
shares per thread count. Protocol (:mod:`tfopt.optimizer.system.worker_process`): the
worker answers ``{"ready": true, "intra_op_threads": n}``, then for each
``{"graph": base64 GraphDef, "runs": r, "warmup": w}`` line answers ``{"seconds": s}``: the fastest
of ``r`` timed runs of the chain of copies, less the fastest empty run, per copy.
"""

from __future__ import annotations

import base64
import sys
import time
import weakref

from tfopt.optimizer.errors import TfoptError, first_line
from tfopt.optimizer.system.worker_process import WorkerProcess, serve

# An op is timed as a chain of copies (at most MAX_CHAINED_COPIES) lasting about CHAIN_SECONDS.
# It never costs less than MIN_OP_SECONDS (timing noise can take the difference below 0).
MAX_CHAINED_COPIES = 8
CHAIN_SECONDS = 2e-3
MIN_OP_SECONDS = 1e-8
# Starting TensorFlow in the worker on two busy cores can take most of a minute.
START_TIMEOUT = 300.0
OP_TIMEOUT = 120.0


class OpTimingError(TfoptError):
    """The op timer failed: it did not start, or it could not time an op."""

    exit_code = 1


class OpTimer:
    """Times op graphs (nodes ``op_0`` .. ``op_{MAX_CHAINED_COPIES-1}`` chained by control
    edges, and a NoOp ``nothing``) in a worker process running ``threads`` intra-op threads
    (0: TensorFlow's default, all cores). The worker starts on the first call and stops at
    :meth:`close`, or when this object is collected."""

    def __init__(self, threads: int = 1):
        if threads < 0:
            raise OpTimingError(f"op timing threads must be >= 0 (0: all cores), got {threads}")
        self.threads = threads
        self.ready: dict = {}  # what the worker reported when it started
        self._worker: WorkerProcess | None = None
        self._finalizer = None

    def seconds(self, graph_def, runs: int, warmup: int) -> float:
        worker = self._started()
        payload = base64.b64encode(graph_def.SerializeToString()).decode("ascii")
        answer = worker.request({"graph": payload, "runs": runs, "warmup": warmup}, OP_TIMEOUT)
        return float(answer["seconds"])

    def _started(self) -> WorkerProcess:
        if self._worker is not None and self._worker.process.poll() is not None:
            self.close()  # it died (an op crashed it): the next op gets a new one
        if self._worker is None:
            worker = WorkerProcess("tfopt.optimizer.search.op_timer", [str(self.threads)],
                                   name=f"op timer ({self.threads or 'all'} threads)",
                                   error=OpTimingError)
            self._finalizer = weakref.finalize(self, worker.close)
            ready = worker.receive(START_TIMEOUT)
            if self.threads and ready.get("intra_op_threads") != self.threads:
                self.close()
                raise OpTimingError(f"the op timer ran with intra_op_threads="
                                    f"{ready.get('intra_op_threads')}, not {self.threads}")
            self._worker, self.ready = worker, ready
        return self._worker

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._worker = self._finalizer = None


_SHARED: dict[int, OpTimer] = {}


def shared_timer(threads: int = 1) -> OpTimer:
    """One timer per thread count for the whole process: starting a worker costs a TensorFlow
    import (about 4 s), and every op cost model of a process can share one. It stops when this
    process exits (EOF on its stdin)."""
    if threads not in _SHARED:
        _SHARED[threads] = OpTimer(threads)
    return _SHARED[threads]


def fastest_op_seconds(graph_def, runs: int, warmup: int, threads: int = 0) -> float:
    """The fastest of ``runs`` timed chains, less the fastest empty run, per copy.

    The minimum, not the median: on a shared machine another process preempting a run of a few
    microseconds multiplies its time (a 1x1 conv's median moved 15 -> 80 us under load, its
    minimum 23 -> 28 us), and the least disturbed run is the op's own cost.
    """
    from tfopt.optimizer.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    # Heeded only by the process's first session, so every session here asks for the same.
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads)
    # Nothing may be folded or fused away: the op itself is what is timed.
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_constant_folding = False
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        one = session.make_callable(graph.get_operation_by_name("op_0"))
        for _ in range(1 + warmup):  # the first runs allocate and pick kernels
            one()
        started = time.perf_counter()
        one()
        estimate = time.perf_counter() - started
        # As many chained copies as fit in about CHAIN_SECONDS, so slow ops stay cheap to time
        # and fast ones are not lost in the run's overhead.
        copies = int(min(max(CHAIN_SECONDS // max(estimate, 1e-9), 1), MAX_CHAINED_COPIES))
        timed = session.make_callable(graph.get_operation_by_name(f"op_{copies - 1}"))
        nothing = session.make_callable(graph.get_operation_by_name("nothing"))
        for _ in range(warmup):
            timed()
            nothing()
        op_samples, empty_samples = [], []
        for _ in range(runs):
            for run, samples in ((timed, op_samples), (nothing, empty_samples)):
                started = time.perf_counter()
                run()
                samples.append(time.perf_counter() - started)
    spent = min(op_samples) - min(empty_samples)
    return max(spent / copies, MIN_OP_SECONDS)


def _start(threads: int):
    from tensorflow.core.framework import graph_pb2

    from tfopt.optimizer.tf_runtime import import_tensorflow

    threading = import_tensorflow().config.threading
    threading.set_intra_op_parallelism_threads(threads)

    def handle(command: dict) -> dict:
        graph_def = graph_pb2.GraphDef.FromString(base64.b64decode(command["graph"]))
        try:
            return {"seconds": fastest_op_seconds(graph_def, command["runs"],
                                                  command["warmup"], threads)}
        except Exception as exc:  # noqa: BLE001 - an op TF refuses to run alone; go on
            return {"error": f"{type(exc).__name__}: {first_line(exc)}"}

    return {"ready": True,
            "intra_op_threads": threading.get_intra_op_parallelism_threads()}, handle


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.exit("usage: python -m tfopt.optimizer.search.op_timer THREADS "
                 "(started by the op cost model; not a command for people)")
    sys.exit(serve(lambda: _start(int(sys.argv[1]))))
