"""The verdict: does a candidate replace the baseline, and which one among those the
gate promoted is served.
"""
