"""The rewrites in the order the simplification runs them, and why in that order.

The stage repeats the whole list until a round changes nothing
(:func:`~tfopt.optimizer.candidates.onnx.rewrites.simplify.simplify`), so the order does not decide
what is found, only how cheaply:

1. ``drop_zero_initial_states`` and 2. ``gather_negative_ids`` need no shape inference and
   delete the most nodes (the zero states' shape computation, the select's arithmetic), so the
   shape inference the later ones run sees a smaller graph.
3. ``tensordot_matmul`` before 4. ``bidirectional_outputs``: a Keras ``Dense`` after a
   ``Bidirectional`` layer reads the concatenation's ``Shape``, and while it does the
   concatenation has two readers, so ``bidirectional_outputs`` cannot fold the batch-major
   ``Transpose`` after it (it would, a round later, find the concatenation gone).
4. ``tensordot_matmul`` and ``bidirectional_outputs`` before 5. ``constant_reshape_shapes``:
   they delete or write with constant targets the reshapes they match. Run before them,
   ``constant_reshape_shapes`` would first give the Tensordot's reshapes constant targets (for
   nothing); it is the catch-all for the reshapes nothing else removed.

A new rewrite is one module with its function, and one line here.
"""

from __future__ import annotations

from tfopt.optimizer.candidates.onnx.rewrites.base import Rewrite
from tfopt.optimizer.candidates.onnx.rewrites.bidirectional_outputs import bidirectional_outputs
from tfopt.optimizer.candidates.onnx.rewrites.constant_reshape_shapes import constant_reshape_shapes
from tfopt.optimizer.candidates.onnx.rewrites.drop_zero_initial_states import (
    drop_zero_initial_states,
)
from tfopt.optimizer.candidates.onnx.rewrites.gather_negative_ids import gather_negative_ids
from tfopt.optimizer.candidates.onnx.rewrites.tensordot_matmul import tensordot_matmul

REWRITES: tuple[Rewrite, ...] = (
    Rewrite("drop_zero_initial_states", drop_zero_initial_states),
    Rewrite("gather_negative_ids", gather_negative_ids),
    Rewrite("tensordot_matmul", tensordot_matmul),
    Rewrite("bidirectional_outputs", bidirectional_outputs),
    Rewrite("constant_reshape_shapes", constant_reshape_shapes),
)
