"""slm's Hydra plugins: the grid sweeper (conf/hydra/sweeper/grid.yaml) and the Slurm launcher (conf/hydra/launcher/slurm.yaml)."""
