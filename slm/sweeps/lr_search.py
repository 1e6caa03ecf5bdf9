"""`hydra.sweeper.lr_search`: every job again at train.lr x each multiplier, an lr axis per point (1 always runs: the
point's own lr, the shared lr the analysis compares against; analysis.tuning takes each configuration at its best lr
and flags a best lr at the edge of the grid)."""

from __future__ import annotations

from typing import Callable

from slm.sweeps.jobs import Job, unique

LR_OVERRIDES = ("train.lr=", "+train.lr=", "++train.lr=")


def lr_text(lr: float) -> str:
    """An lr as the override writes it: 6 significant digits, so a job key stays short and stable."""
    return f"{lr:.6g}"


def at_lr(compose: Callable[[list[str]], Job], job: Job, multiplier: float) -> Job:
    """The job at its train.lr x `multiplier` (the job itself for 1: its key and run stay those without a search)."""
    if multiplier == 1.0:
        return job
    overrides = [o for o in job.overrides if not str(o).startswith(LR_OVERRIDES)]
    return compose(overrides + [f"train.lr={lr_text(float(job.select('train.lr')) * multiplier)}"])


def search_lr(compose: Callable[[list[str]], Job], jobs: list[Job], multipliers: list[float]
              ) -> tuple[list[Job], dict[str, float]]:
    """Every job at train.lr x each multiplier (the job as given for 1), and {job key: multiplier}; `compose`:
    overrides -> Job. A job that does not compose is kept once, as given."""
    if not multipliers:
        return jobs, {}
    out, searched = [], {}
    for job in jobs:
        if job.cfg is None:
            out.append(job)
            continue
        for m in multipliers:
            variant = at_lr(compose, job, m)
            out.append(variant)
            searched[variant.key] = m
    return unique(out), searched
