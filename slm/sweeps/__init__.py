"""Sweeps, below the CLI and Hydra: a sweep's settings, plan, ladders, halving, lr search and the job side, its
sweep.json store and where it stands, above the runs (slm.runs) it is made of."""
