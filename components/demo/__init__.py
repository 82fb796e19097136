"""`make demo`: the whole pipeline on embedded defaults, and the digits model it optimizes."""
