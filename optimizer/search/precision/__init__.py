"""Accuracy-aware mixed precision: a search over which quantizable layers stay in float.

:mod:`.table` holds what was measured once (each layer's int8 and float cost, the cost of a
quantize/dequantize boundary, the error of quantizing each layer alone and of keeping each alone
in float) and predicts an assignment's latency and error from it; :mod:`.search` searches the
assignments (greedy fallback, relaxed queue). Both are plain Python. The runtimes' parts (what a
layer is, how it is costed and quantized) are :mod:`.onnx_runtime` (ONNX Runtime static int8,
``nodes_to_exclude``) and :mod:`.litert_runtime` (LiteRT full int8, denylisted nodes); what is
measured on built models, whatever the runtime, is :mod:`.measure`; the pipeline's part (search,
build, measure for real, hand the candidate to the gate) is :mod:`.candidates`. User
documentation: docs/precision_search.md.
"""
