"""The MLflow ``ModelSignature`` and input example of a published model, from its SavedModel
signature.

Every format tfopt publishes keeps the source SavedModel's serving signature (a LiteRT file is
converted with the same input and output keys, float32 in and out), so one description serves
them all: a tensor spec per input and output, named by its signature key, with its dtype and
shape (an unknown dimension is -1, as MLflow writes it). MLflow checks every ``predict`` input
against it, and the registry UI shows it as the version's schema.

The example is one row of inputs made from the signature (:func:`tfopt.optimizer.inputs.generated.make_inputs`:
standard-normal floats rounded to 3 decimals, small integer ids), enough to show the shape of a
call and to check a served model answers; it is not data the model was trained on.
"""

from __future__ import annotations

import logging

import numpy as np

from tfopt.optimizer.errors import InvalidInputsError
from tfopt.optimizer.model.signature import SignatureInfo, TensorSpecInfo

log = logging.getLogger(__name__)

EXAMPLE_DECIMALS = 3  # keeps input_example.json small; any float32 value is a valid input


def _tensor_spec(spec: TensorSpecInfo):
    from mlflow.types.schema import TensorSpec

    shape = tuple(-1 if d is None else d for d in spec.shape)
    return TensorSpec(np.dtype(spec.numpy_dtype), shape, spec.key)


def model_signature(signature: SignatureInfo):
    """The ``mlflow.models.ModelSignature`` of ``signature``; None when a tensor has unknown
    rank, which a tensor spec cannot say (MLflow would then refuse every input of it)."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema

    unknown = [s.key for s in (*signature.inputs, *signature.outputs) if s.shape is None]
    if unknown:
        log.warning("mlflow model: %s of unknown rank; the model is logged without a signature",
                    ", ".join(unknown))
        return None
    return ModelSignature(inputs=Schema([_tensor_spec(s) for s in signature.inputs]),
                          outputs=Schema([_tensor_spec(s) for s in signature.outputs]))


def input_example(signature: SignatureInfo) -> dict[str, np.ndarray] | None:
    """One row of inputs for ``signature``; None when they cannot be made (strings, unknown
    rank), and the model is logged without an example."""
    from tfopt.optimizer.inputs.generated import make_inputs

    try:
        feeds = make_inputs(signature, batch_size=1, seed=0)
    except InvalidInputsError as exc:
        log.warning("mlflow model: no input example: %s", exc)
        return None
    return {key: np.round(value, EXAMPLE_DECIMALS).astype(value.dtype)
            if value.dtype.kind == "f" else value for key, value in feeds.items()}
