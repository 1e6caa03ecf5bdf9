"""Which process of a data-parallel job this is, before Lightning has set anything up.

A job of train.parallel.devices x train.parallel.num_nodes processes is started by one of: Slurm (srun / submitit starts every
task: SLURM_PROCID), torchrun (RANK), or Lightning itself, which starts ranks 1.. of a single-node job by
running the same command again with LOCAL_RANK and NODE_RANK set (rank 0 is the process the user started).
Only rank 0 owns the run directory: it takes the lock, writes the record, the logs, the checkpoints and the
weights; the other ranks train and stay silent.
"""

from __future__ import annotations

import os


def is_rank_zero(env: dict[str, str] | None = None) -> bool:
    """Whether this process owns the run directory (see the module docstring): True unless a launcher's
    environment names another rank."""
    env = os.environ if env is None else env

    def number(key: str) -> int:
        return int(env.get(key) or 0)

    if "RANK" in env:  # torchrun
        return number("RANK") == 0
    if "LOCAL_RANK" in env:  # a rank Lightning started, or a hand-made launch
        return number("LOCAL_RANK") == 0 and number("NODE_RANK") == 0
    if number("SLURM_NTASKS") > 1:  # one task of a multi-task Slurm job
        return number("SLURM_PROCID") == 0
    return True


def started_by_launcher(env: dict[str, str] | None = None) -> bool:
    """Whether a launcher started this process as one of a job's (torchrun, a multi-task Slurm job, or a rank
    Lightning started): then Lightning starts no processes of its own."""
    env = os.environ if env is None else env
    return "RANK" in env or "LOCAL_RANK" in env or int(env.get("SLURM_NTASKS") or 1) > 1
