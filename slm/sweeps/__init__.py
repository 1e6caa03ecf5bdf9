"""Sweeps: what a sweep of runs is made of and where it stands, above the runs (slm.runs) it is made of."""
