"""Accuracy-aware mixed precision: a search over which quantizable layers stay in float.

:mod:`.table` holds what was measured once (each layer's int8 and float cost, the cost of a
quantize/dequantize boundary, the error of quantizing each layer alone and of keeping each alone
in float) and predicts an assignment's latency and error from it; :mod:`.search` searches the
assignments (greedy fallback, relaxed queue). Both are plain Python: the runtime's part (what a
layer is, how it is timed and quantized) is in :mod:`.onnx_runtime`, and the pipeline's (search,
build, measure for real, hand the candidate to the gate) in :mod:`.candidates`.
"""
