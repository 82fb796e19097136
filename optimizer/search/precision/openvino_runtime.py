"""The precision search's view of a model in OpenVINO: NNCF's int8 with selected ops kept in
float.

- **Mixed models**: the SavedModel converted once (:class:`~tfopt.optimizer.candidates.openvino.
  convert.OpenVINOExport`), then each assignment quantized by NNCF's post-training quantization
  (what the ``int8`` flavour runs) with the float layers as ``IgnoredScope(names=...)``
  (:func:`tfopt.optimizer.candidates.openvino.convert.quantize_int8`). NNCF caches statistics only
  for weight compression, so each build calibrates again (about a second on a small model);
  an assignment built once is not built again (the table asks for uniform int8 and each
  single fallback twice: for the sensitivity and for the costs).
- **Layers**: the ops NNCF really quantizes, named by their friendly names (NNCF's graph
  names its nodes so, and ``IgnoredScope`` matches them): the ops of uniform int8 whose type
  NNCF quantizes the inputs of (matrix products, convolutions, element-wise arithmetic,
  pooling, normalizations) and that a FakeQuantize reaches, directly or through ops that only
  move data. What NNCF leaves in float by its own patterns (a scale and shift at the model's
  input, which the CPU plugin fuses; a bias Add, a Relu) is not a layer: no assignment could
  change it.
- **Costs**: the CPU plugin fuses a layer with its quantizers, bias and activation, so a
  layer is not timed alone; as for LiteRT, a layer's float cost is measured end to end
  (:class:`~tfopt.optimizer.search.precision.measure.EndToEndLayerCosts`), its boundaries folded in.
- Every IR built carries its sidecar (hint ``f32``): the runner compiles it as the candidate
  will run, not in the bf16 a bfloat16 CPU defaults to (:mod:`tfopt.optimizer.runtime.openvino`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tfopt.optimizer.search.precision.table import INPUT, OUTPUT

log = logging.getLogger(__name__)

# Ops through which a quantizer reaches the op it quantizes for (NNCF propagates quantizers up
# through them), besides NNCF's own quantization-agnostic group.
_PASS_THROUGH = frozenset({"Concat", "Convert"})


def _nncf_op_types() -> tuple[frozenset, frozenset]:
    """(the OpenVINO op types NNCF quantizes the inputs of, those it only moves data
    through)."""
    from nncf.openvino.graph.metatypes.groups import (
        INPUTS_QUANTIZABLE_OPERATIONS,
        QUANTIZE_AGNOSTIC_OPERATIONS,
    )

    def names(metatypes) -> frozenset:
        return frozenset(n for m in metatypes for n in m.get_all_aliases())

    return names(INPUTS_QUANTIZABLE_OPERATIONS), names(QUANTIZE_AGNOSTIC_OPERATIONS)


def quantized_layers(model) -> tuple[str, ...]:
    """The friendly names of the ops NNCF quantized in ``model`` (uniform int8), in graph
    order."""
    quantizable, agnostic = _nncf_op_types()
    passing = agnostic | _PASS_THROUGH

    def quantized(node, depth: int = 0) -> bool:
        if node.get_type_name() == "FakeQuantize":
            return True
        if node.get_type_name() not in passing or depth > 20:
            return False
        return any(quantized(i.get_source_output().get_node(), depth + 1)
                   for i in node.inputs())

    return tuple(op.get_friendly_name() for op in model.get_ordered_ops()
                 if op.get_type_name() in quantizable
                 and any(quantized(i.get_source_output().get_node()) for i in op.inputs()))


class OpenVINOPrecisionModel:
    """A SavedModel converted once to OpenVINO and its calibration, from which any
    assignment's mixed IR is built under ``work``; ``prepared`` is the float IR, the
    reference."""

    suffix = ".xml"
    format = "openvino"

    def __init__(self, export, signature: str, feeds: Sequence[Mapping[str, np.ndarray]],
                 work: Path):
        from tfopt.optimizer.candidates.openvino.convert import quantize_int8

        self.export, self.signature = export, signature
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.feeds = [dict(f) for f in feeds]
        self.graph = export.model()
        self.prepared = self._save(self.graph, self.work / "float.xml", "fp32", {})
        uniform = quantize_int8(export.model(), self.feeds, what=str(export.saved_model))
        self.layers = quantized_layers(uniform)
        self._built = {frozenset(): self._save(uniform, self.work / "assignment_1.xml",
                                               "mixed_int8", {"float_nodes": []})}

    def _save(self, model, xml: Path, flavour: str, options: dict) -> Path:
        import openvino as ov

        from tfopt.optimizer.candidates.openvino.convert import ir_sidecar
        from tfopt.optimizer.model.sidecar import write_sidecar
        from tfopt.optimizer.runtime.openvino import model_signature

        ov.save_model(model, str(xml), compress_to_fp16=False)
        write_sidecar(ir_sidecar(xml, flavour, model_signature(model, self.signature), options,
                                 str(self.export.saved_model)), overwrite=True)
        return xml

    def build(self, float_layers: Sequence[str] = (), only: Sequence[str] | None = None,
              dst: Path | None = None) -> Path:
        """The IR with ``float_layers`` left in float (or only ``only`` quantized), written
        to ``dst`` (default: a fresh file under ``work``)."""
        from tfopt.optimizer.candidates.openvino.convert import quantize_int8

        ignored = (tuple(float_layers) if only is None
                   else tuple(n for n in self.layers if n not in set(only)))
        if dst is None and frozenset(ignored) in self._built:
            return self._built[frozenset(ignored)]
        model = quantize_int8(self.export.model(), self.feeds, ignored,
                              str(self.export.saved_model))
        built = self._save(model, dst or self.work / f"assignment_{len(self._built) + 1}.xml",
                           "mixed_int8", {"float_nodes": list(ignored)})
        if dst is None:
            self._built[frozenset(ignored)] = built
        return built

    def edges(self) -> list[tuple[str, str, str]]:
        """(producer, consumer, tensor) between layers of the float graph, through the ops
        that are not layers, and from the model's inputs and to its outputs."""
        layers = set(self.layers)

        def source(output, depth: int = 0) -> tuple[str, str] | None:
            node = output.get_node()
            tensor = f"{node.get_friendly_name()}:{output.get_index()}"
            if node.get_type_name() == "Parameter":
                return INPUT, tensor
            if node.get_friendly_name() in layers:
                return node.get_friendly_name(), tensor
            if node.get_type_name() == "Constant" or depth > 50:
                return None
            found = [s for s in (source(i.get_source_output(), depth + 1)
                                 for i in node.inputs()) if s is not None]
            return found[0] if found else None

        edges = []
        for op in self.graph.get_ordered_ops():
            name = op.get_friendly_name()
            if name in layers:
                edges += [(found[0], name, found[1]) for i in op.inputs()
                          if (found := source(i.get_source_output())) is not None]
            elif op.get_type_name() == "Result":
                found = source(op.input(0).get_source_output())
                if found is not None and found[0] != INPUT:
                    edges.append((found[0], OUTPUT, found[1]))
        return list(dict.fromkeys(edges))
