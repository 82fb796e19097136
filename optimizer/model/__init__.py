"""A model on disk and in memory: the SavedModel read without running it, its serving
signature, the op scan that refuses unsafe models, freezing into one GraphDef, writing it back
as a SavedModel, the sidecar of a converted model file, and the memory a model takes.
"""
