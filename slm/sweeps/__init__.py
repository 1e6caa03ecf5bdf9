"""A sweep of jobs, below the CLI and Hydra: its settings, plan, ladders, halving, lr search and the job side."""
