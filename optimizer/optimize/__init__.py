"""SavedModel in, optimized SavedModel out: the flow behind ``tfopt optimize``, the
transform recipes it runs (in Python or through TensorFlow's native GTT), and the worker
process big models are optimized in.
"""
