"""Serving signatures as plain data: keys, dtypes and shapes, read from ``saved_model.pb``.

The signature is the contract with TF Serving and with every caller of
``tf.saved_model.load(dst).signatures[...]``; an optimized model must present the same one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
from pydantic import ConfigDict, Field, model_serializer

from tfopt.optimizer.records import JsonRecord, in_order

# DataType enum values from tensorflow/core/framework/types.proto, so that reading a signature
# does not need TensorFlow imported.
_DTYPE_NAMES = {
    1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
    9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 19: "float16", 22: "uint32",
    23: "uint64",
}
_DTYPE_ENUMS = {name: enum for enum, name in _DTYPE_NAMES.items()}

Shape = tuple[int | None, ...] | None  # None: unknown rank; a None dim: unknown size


def dtype_name(enum: int) -> str:
    return _DTYPE_NAMES.get(enum, f"dtype_enum_{enum}")


def dtype_enum(name: str) -> int:
    return _DTYPE_ENUMS[name]


@dataclass(frozen=True)
class TensorSpecInfo(JsonRecord):
    """One input or output of a signature: its key, graph tensor, dtype and shape."""

    # written as "tensor" (the JSON's name, older than the field's), read by either name
    __pydantic_config__ = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    key: str
    tensor_name: Annotated[str, Field(alias="tensor")]
    dtype: str
    shape: Shape

    @classmethod
    def from_tensor_info(cls, key: str, info) -> TensorSpecInfo:
        if info.tensor_shape.unknown_rank:
            shape: Shape = None
        else:
            shape = tuple(None if d.size < 0 else int(d.size) for d in info.tensor_shape.dim)
        return cls(key=key, tensor_name=info.name, dtype=dtype_name(info.dtype), shape=shape)

    def with_tensor_name(self, tensor_name: str) -> TensorSpecInfo:
        return TensorSpecInfo(self.key, tensor_name, self.dtype, self.shape)

    @property
    def numpy_dtype(self) -> np.dtype:
        if self.dtype == "string":
            return np.dtype(object)
        if self.dtype == "bfloat16":
            return np.dtype(np.float32)  # fed as float32 and cast by the graph's callers
        return np.dtype(self.dtype)

    def same_contract(self, other: TensorSpecInfo) -> bool:
        """Key, dtype and shape match; the graph tensor name is free to differ."""
        return (self.key, self.dtype, self.shape) == (other.key, other.dtype, other.shape)

    def describe(self) -> str:
        dims = "?" if self.shape is None else "(" + ", ".join(
            "None" if d is None else str(d) for d in self.shape) + ")"
        return f"{self.key}: {self.dtype}{dims}"


@dataclass(frozen=True)
class SignatureInfo(JsonRecord):
    name: str
    inputs: tuple[TensorSpecInfo, ...]
    outputs: tuple[TensorSpecInfo, ...]
    method_name: str = "tensorflow/serving/predict"

    @classmethod
    def from_signature_def(cls, name: str, sig_def) -> SignatureInfo:
        return cls(
            name=name,
            inputs=tuple(TensorSpecInfo.from_tensor_info(k, sig_def.inputs[k])
                         for k in sorted(sig_def.inputs)),
            outputs=tuple(TensorSpecInfo.from_tensor_info(k, sig_def.outputs[k])
                          for k in sorted(sig_def.outputs)),
            method_name=sig_def.method_name or "tensorflow/serving/predict",
        )

    @property
    def input_keys(self) -> list[str]:
        return [s.key for s in self.inputs]

    @property
    def output_keys(self) -> list[str]:
        return [s.key for s in self.outputs]

    def same_contract(self, other: SignatureInfo) -> bool:
        return (
            len(self.inputs) == len(other.inputs)
            and len(self.outputs) == len(other.outputs)
            and all(a.same_contract(b) for a, b in zip(self.inputs, other.inputs))
            and all(a.same_contract(b) for a, b in zip(self.outputs, other.outputs))
        )

    def describe(self) -> str:
        ins = ", ".join(s.describe() for s in self.inputs)
        outs = ", ".join(s.describe() for s in self.outputs)
        return f"{self.name}({ins}) -> {{{outs}}}"

    @model_serializer(mode="wrap")
    def _stored_form(self, fields) -> dict:
        # the JSON's order, older than the fields' (the default comes last)
        return in_order(fields(self), ("name", "method_name", "inputs", "outputs"))


def contract_difference(saved: SignatureInfo, converted: SignatureInfo) -> str | None:
    """Why a converted model's signature is not the SavedModel's contract, or None.

    Keys must be the same, in the same order, with the same dtypes; a dimension may be unknown
    on either side, but a known one must agree (a converter may pin the batch dimension)."""
    pairs = (("input", saved.inputs, converted.inputs),
             ("output", saved.outputs, converted.outputs))
    for kind, want, got in pairs:
        if [s.key for s in want] != [s.key for s in got]:
            return (f"its {kind}s are {[s.key for s in got]}, the SavedModel's "
                    f"{[s.key for s in want]}")
        for a, b in zip(want, got):
            if a.dtype != b.dtype:
                return f"{kind} '{a.key}' became {b.dtype} (was {a.dtype})"
            if a.shape is not None and b.shape is not None and (
                    len(a.shape) != len(b.shape)
                    or any(x is not None and y is not None and x != y
                           for x, y in zip(a.shape, b.shape))):
                return f"{kind} '{a.key}' has shape {b.describe()} (was {a.describe()})"
    return None
