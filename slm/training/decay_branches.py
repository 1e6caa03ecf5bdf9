"""Decay branches against a run's length (train.schedule.decay_branches): for each fraction, the wsd run of that
fraction of the length, whose stable phase is the run's own up to the step its decay begins. Planned once per job
(slm.runs.preflight), trained by slm.runs.branches; the sweep's dry run counts their steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slm.settings import SettingsError
from slm.training.schedules import decay_start

KEY = "train.schedule.decay_branches"


@dataclass(frozen=True)
class DecayBranch:
    """One of train.schedule.decay_branches against a run's length: the wsd run of that fraction of the length, whose
    stable phase is the run's own up to `start` (slm.runs.branches trains it)."""

    fraction: float
    steps: int
    """The branch's optimizer steps (its max_steps)."""
    start: int
    """The step its decay begins at: the run's checkpoint of this step is the branch's resume checkpoint."""
    length: dict
    """The branch's train.length: the run's, times the fraction, in the unit the run was given (tokens x f, trained
    in whole batches as any token budget; round(steps x f))."""


def plan_branches(schedule, length, batch_size: int, context_length: int) -> list[DecayBranch]:
    """`schedule.decay_branches` (train.schedule, a ScheduleSettings) against the run's `length` (train.length) at
    `batch_size` x `context_length` tokens a step, by fraction; SettingsError (one line naming the fraction and what
    is allowed) for a branch as long as the run, one whose decay would begin before the end of the warmup, or two of
    the same length."""
    given = list(schedule.decay_branches)
    if not given:
        return []
    total = length.max_steps(batch_size, context_length)
    warmup, decay = schedule.warmup(total), schedule.decay_fraction
    first = max(warmup, 1)  # a branch shares all of the warmup and at least one step with the run
    out: list[DecayBranch] = []
    for f in sorted(given):
        steps, branch_length = _length(f, length, batch_size * context_length)
        start = decay_start(steps, decay)
        _check(given, f, steps, start, total, warmup, first, decay, out[-1] if out else None)
        out.append(DecayBranch(f, steps, start, branch_length))
    return out


def _length(fraction: float, length, per_step: int) -> tuple[int, dict]:
    """A branch's steps and train.length: round(steps x f) for a run given in steps, else tokens x f in whole
    batches."""
    if length.steps is not None:
        steps = round(fraction * length.steps)
        return steps, {"steps": steps}
    tokens = fraction * length.tokens
    return int(tokens // per_step), {"tokens": tokens}


def _check(given: list, f: float, steps: int, start: int, total: int, warmup: int, first: int, decay: float,
           before: DecayBranch | None) -> None:
    where = f"the branch at {f} ({steps} of the run's {total} steps)"
    if steps >= total:
        most = f"a fraction of at most {_down((total - 1) / total)}" if total > 1 else "none at this length"
        raise SettingsError.invalid(KEY, given, f"{where} is as long as the run: {most} is allowed")
    if start < first:
        shortest = _shortest(first, total, decay)
        limit = f"the end of the warmup (step {warmup})" if warmup else "step 1 (it would share no step with the run)"
        allowed = (f"a fraction of at least {_up(shortest / total)} ({shortest} steps) is allowed"
                   if shortest is not None else
                   f"none is allowed at this length: shorten the warmup ({warmup} steps) or lengthen the run")
        raise SettingsError.invalid(KEY, given, f"{where} would begin its decay at step {max(start, 0)}, "
                                    f"before {limit}; {allowed}")
    if before is not None and before.steps == steps:
        raise SettingsError.invalid(KEY, given, f"the branches at {before.fraction} and {f} are both "
                                    f"{steps} steps long: give fractions a step apart or more")


def _shortest(first: int, total: int, decay_fraction: float) -> int | None:
    """The fewest steps (< total) of a wsd run whose decay begins at `first` or later; None if none."""
    lo, hi = 1, total - 1  # decay_start never decreases with the length: bisect
    if hi < 1 or decay_start(hi, decay_fraction) < first:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if decay_start(mid, decay_fraction) < first else (lo, mid)
    return lo


def _up(x: float) -> float:
    """x rounded up at its third significant digit (an allowed fraction, said in few digits)."""
    scale = 10 ** (2 - math.floor(math.log10(x)))
    return math.ceil(x * scale - 1e-9) / scale


def _down(x: float) -> float:
    """x rounded down at its third significant digit."""
    scale = 10 ** (2 - math.floor(math.log10(x)))
    return math.floor(x * scale + 1e-9) / scale
