"""Whether an optimized model still does its job: the equivalence check against the
source and its tolerance, accuracy on labelled data, and whether TF Serving can load it.
"""
