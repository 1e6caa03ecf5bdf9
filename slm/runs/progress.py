"""A sweep's progress: its jobs counted by state (slm.runs.states) and the time left (the sweepers' progress lines and
slm-status print it).

The time left is estimated from the completed jobs' recorded times (slm.runs.states.job_seconds), and from a paused or
pruned job's pace over all its steps (successive halving's rungs, where no job completes until the last: an upper
bound, "eta at most", since halving prunes some of what is left).
"""

from __future__ import annotations

from dataclasses import dataclass

from slm.durations import duration
from slm.runs.states import (COMPLETED, DIVERGED, FAILED, FINISHED, PAUSED, PENDING, PRUNED, RUNNING, STOPPED,
                             UNREADABLE, JobState)

TO_DO = (RUNNING, STOPPED, PAUSED, PENDING)  # a job that still has training to do
SHOWN = (COMPLETED, PRUNED, FAILED, DIVERGED, UNREADABLE, RUNNING, STOPPED, PAUSED, PENDING)  # progress lines' order
ALWAYS_SHOWN = (COMPLETED, FAILED, RUNNING, PENDING)  # shown when zero too


@dataclass
class Progress:
    """Where a sweep's jobs stand, and the time left estimated from its completed jobs' recorded times."""
    total: int
    counts: dict[str, int]
    left: float  # jobs' worth of training left: pending and stopped jobs, running ones less the steps they have done
    per_job: float | None  # mean seconds of a whole job: the `timed` completed jobs that record them (job_seconds),
    # and paused or pruned ones (halving's rungs) at their pace over all their steps
    timed: int
    at_once: int  # jobs training at once

    @property
    def done(self) -> int:
        return sum(self.counts.get(s, 0) for s in FINISHED)

    @property
    def unfinished(self) -> int:
        return sum(self.counts.get(s, 0) for s in TO_DO)

    @property
    def eta(self) -> float | None:
        """Seconds until every job is done: left x per_job / at_once; None without a completed job to time."""
        if not self.unfinished or self.per_job is None:
            return None
        return self.left * self.per_job / self.at_once


def _fraction_done(state: JobState) -> float:
    if state.status == PENDING or not state.max_steps or not isinstance(state.step, int):
        return 0.0
    return min(max(state.step / state.max_steps, 0.0), 1.0)


def sweep_progress(states: list[JobState], copies: int | None = None) -> Progress:
    """The progress of these jobs; `copies`: how many processes share the sweep (slm-workers), else the jobs
    running now (at least 1) are taken as the jobs that train at once."""
    tally = {s: 0 for s in ALWAYS_SHOWN}
    for s in states:
        tally[s.status] = tally.get(s.status, 0) + 1
    times = [s.seconds for s in states if s.status in (COMPLETED, PAUSED, PRUNED) and s.seconds is not None]
    unfinished = [s for s in states if s.status in TO_DO]
    at_once = max(copies or 1, tally[RUNNING], 1)
    return Progress(total=len(states), counts=tally, left=sum(1.0 - _fraction_done(s) for s in unfinished),
                    per_job=sum(times) / len(times) if times else None, timed=len(times),
                    at_once=max(1, min(at_once, len(unfinished))))


def progress_text(p: Progress, why: bool = False) -> str:
    """`2 completed, 0 failed, 1 running, 1 pending (2 of 4 done); eta 4m10s`; `why`: with what the eta is made of."""
    shown = [s for s in SHOWN if s in ALWAYS_SHOWN or p.counts.get(s)]
    shown += [s for s in p.counts if s not in SHOWN and p.counts[s]]
    text = ", ".join(f"{p.counts.get(s, 0)} {s}" for s in shown) + f" ({p.done} of {p.total} done)"
    if not p.unfinished:
        return text
    if p.per_job is None:
        return text + ("; eta unknown: no completed job records its training time (training.wall_seconds)"
                       if p.counts.get(COMPLETED) else "; eta after the first job completes")
    text += f"; eta {'at most ' if p.counts.get(PAUSED) else ''}{duration(p.eta)}"  # halving prunes some of it
    if why:
        parted = p.counts.get(PAUSED, 0) + p.counts.get(PRUNED, 0)
        text += (f": {p.left:.3g} jobs left x {duration(p.per_job)} per job (the mean time of {p.timed} "
                 + ("completed " if not parted else "") + f"job{'s' if p.timed != 1 else ''}: training, and where "
                 "recorded the final validation and scoring"
                 + ("; a paused or pruned one's pace over all its steps" if parted else "")
                 + f"; data preparation not counted), {p.at_once} at a time"
                 + ("; at most: successive halving prunes some of what is left" if p.counts.get(PAUSED) else "")
                 + ("; nothing is running now" if not p.counts.get(RUNNING) else ""))
    return text

