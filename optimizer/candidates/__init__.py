"""More candidates from one model, each for the runtime and format it needs: bf16 and
XLA SavedModels, and models converted for LiteRT, ONNX Runtime and OpenVINO, built in a worker
process of their own.
"""
