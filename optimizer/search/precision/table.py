"""What the precision search knows of a model, measured once, and what it predicts from it.

An *assignment* is the set of quantizable layers kept in float (every other one is int8). The
table holds, per layer:

- ``int8_seconds`` and ``float_seconds``: the layer's own cost in each precision, timed alone
  on this machine (cached per machine: :mod:`tfopt.optimizer.search.precision.onnx_runtime`);
- the error of quantizing it alone (``quantized_alone``: every other layer float) and of keeping
  it alone in float (``float_alone``: every other layer int8), measured once on labelled data
  (accuracy lost) or on calibration data (top-1 disagreement with the float model);

and per data edge between two layers (or a layer and the model's float input or output), the
cost of the quantize or dequantize an edge between two precisions needs.

Predicted latency: ``base_seconds`` (what no layer's precision changes: the call, the
unquantizable ops) plus each layer's cost in its precision plus each boundary's cost.

Predicted error, from the two measurements: quantization errors add (the sum of the
``quantized_alone`` errors of the int8 layers, as per-layer sensitivity methods assume), but an
assignment keeping layer ``l`` in float can do no worse than ``float_alone[l]``, measured: the
prediction is the smaller. The empty assignment (uniform int8) is measured, not predicted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

INPUT, OUTPUT = "<input>", "<output>"  # the model's float input and output, as edge ends

Assignment = frozenset  # of the layers kept in float


@dataclass(frozen=True)
class PrecisionTable:
    layers: tuple[str, ...]  # quantizable layers, in graph order
    int8_seconds: Mapping[str, float]
    float_seconds: Mapping[str, float]
    edges: tuple[tuple[str, str, float], ...]  # (producer, consumer, boundary seconds)
    quantized_alone: Mapping[str, float]  # error with only this layer int8
    float_alone: Mapping[str, float]  # error with only this layer float
    int8_error: float  # error of uniform int8, measured
    base_seconds: float = 0.0
    metric: str = "error"  # what the errors are: "accuracy drop" or "top-1 disagreement"
    _neighbours: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        missing = [name for name in ("int8_seconds", "float_seconds", "quantized_alone",
                                     "float_alone")
                   if set(getattr(self, name)) != set(self.layers)]
        if missing:
            raise ValueError(f"precision table: {', '.join(missing)} must hold every layer")
        ends = set(self.layers) | {INPUT, OUTPUT}
        stray = [e for e in self.edges if e[0] not in ends or e[1] not in ends]
        if stray:
            raise ValueError(f"precision table: edge {stray[0][:2]} names an unknown layer")

    def is_float(self, name: str, assignment: Assignment) -> bool:
        return name in (INPUT, OUTPUT) or name in assignment

    def latency(self, assignment: Assignment) -> float:
        seconds = self.base_seconds + sum(
            self.float_seconds[n] if n in assignment else self.int8_seconds[n]
            for n in self.layers)
        return seconds + sum(cost for a, b, cost in self.edges
                             if self.is_float(a, assignment) != self.is_float(b, assignment))

    def error(self, assignment: Assignment) -> float:
        if not assignment:
            return self.int8_error
        added = sum(max(0.0, self.quantized_alone[n]) for n in self.layers
                    if n not in assignment)
        return min([added] + [self.float_alone[n] for n in assignment])

    def boundaries(self, assignment: Assignment) -> int:
        return sum(self.is_float(a, assignment) != self.is_float(b, assignment)
                   for a, b, _ in self.edges)

    def neighbours(self, name: str) -> set[str]:
        """The layers one data edge away from ``name``."""
        if self._neighbours is None:
            linked: dict[str, set[str]] = {n: set() for n in self.layers}
            for a, b, _ in self.edges:
                if a in linked and b in linked:
                    linked[a].add(b)
                    linked[b].add(a)
            object.__setattr__(self, "_neighbours", linked)
        return self._neighbours[name]

    def ordered(self, names: Iterable[str]) -> list[str]:
        """``names`` in graph order."""
        wanted = set(names)
        return [n for n in self.layers if n in wanted]

    def to_dict(self) -> dict:
        return {"layers": list(self.layers), "int8_seconds": dict(self.int8_seconds),
                "float_seconds": dict(self.float_seconds),
                "edges": [list(e) for e in self.edges],
                "quantized_alone": dict(self.quantized_alone),
                "float_alone": dict(self.float_alone), "int8_error": self.int8_error,
                "base_seconds": self.base_seconds, "metric": self.metric}
