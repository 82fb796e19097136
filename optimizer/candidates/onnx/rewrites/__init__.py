"""ONNX graph simplification: exact rewrites of what tf2onnx writes, before ONNX Runtime's own
optimization (the ``optimized`` flavour, :mod:`tfopt.optimizer.candidates.onnx.convert`).

ONNX Runtime's optimizers fold what they can prove with static shapes; tf2onnx's graphs compute
much of their shape bookkeeping from the batch size, which is unknown, so it stays, run every
call. These rewrites prove it away with symbolic shapes and the ops' own semantics. Modelled on
tf2onnx's optimizer package and TensorFlow's ``optimize_for_inference``:

- each rewrite is a pure ``ModelProto -> ModelProto`` function in a module named after it, whose
  docstring says what it rewrites and why it is exact; a pattern that does not match is left
  alone;
- :mod:`~.base` runs each one the same way: count the ops, rewrite, eliminate the dead nodes,
  check the graph, log the delta; a rewrite that raises is logged and skipped;
- :mod:`~.registry` orders them, and says why; :mod:`~.simplify` repeats the list until nothing
  changes.

Graph inputs and outputs (names, dtypes, shapes) are never touched, and a replacement keeps the
output names of what it replaces.
"""
