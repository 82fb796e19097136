"""What is fed to a model: inputs generated from a signature (with the vocabulary its
lookup tables expect), labelled or unlabelled data files, and calibration sets for int8.
"""
