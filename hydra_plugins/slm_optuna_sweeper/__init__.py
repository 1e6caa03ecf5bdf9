"""Optuna (>= 4) sweeper for Hydra on the ask/tell interface (conf/hydra/sweeper/optuna.yaml)."""
