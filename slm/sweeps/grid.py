"""One grid sweep from its jobs' overrides to their outcomes: the plan (the lr search, a ladder's rungs, halving's
checks), the dry run, and the run (sweep.json, each job launched or passed over, halving's rungs, a ladder's carried
lr, the summary). Hydra's side (the overrides crossed, a job composed, the launcher) comes in as two callables:

    compose(overrides) -> Job                                   (hydra_plugins/slm_sweeps/compose.py: Composer)
    launch(jobs, initial_job_idx) -> [(returned, error line or None) per job]   (the hydra/launcher)

Every job is composed before anything is launched: a job whose overrides do not compose is recorded failed in its run
directory (the others still run), jobs that name the same run directory run once, and jobs already completed (or failed
or diverged, unless rerun_failed=true) are not launched at all, nor is a job whose result.json cannot be read (one line
on stderr; it is `unreadable` in the summary). Launched one by one (the basic launcher) each job has a progress line
before and after it (`job i of n`, the whole sweep's counts and the time left), read from the run directories between
jobs; a job that another process has taken or finished since the sweep began (a copy of the sweep: slm-workers) is
passed over. Otherwise (Slurm) `batch_size` jobs at a time, one array each.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

from slm.sweeps import halving as H
from slm.sweeps import jobs as J
from slm.sweeps import ladder as L
from slm.sweeps import progress as P
from slm.sweeps.jobs import Job
from slm.sweeps.lr_search import search_lr
from slm.sweeps.settings import SweepSettings

Compose = Callable[[list[str]], Job]
Launch = Callable[[list[Job], int], list[tuple[Any, Optional[str]]]]


@dataclass
class Planned:
    """The jobs to launch first, composed; {key: lr multiplier}; the ladder's Plan (or None) and {key: its RungJob}."""

    jobs: list[Job]
    multipliers: dict[str, float] = field(default_factory=dict)
    ladder: Optional[L.Plan] = None
    owners: dict[str, L.RungJob] = field(default_factory=dict)


@dataclass
class GridSweep:
    """A grid sweep: its settings, name (the run group) and directory, how a job is composed and how jobs are
    launched (see the module docstring)."""

    settings: SweepSettings
    name: str
    sweep_dir: Path
    compose: Compose
    launch: Launch
    rerun_failed: bool = False
    one_by_one: bool = True
    """Launch each job on its own with progress lines (the basic launcher), else `batch_size` at a time."""
    batch_size: Optional[int] = None

    def plan(self, overrides: list[list[str]]) -> Planned:
        """Every job composed, at each lr of the search and each rung of a ladder; halving's rungs checked against each
        job (SweepError, one line, before anything is made)."""
        jobs = J.unique([self.compose(o) for o in overrides])
        ladder, halving = self.settings.ladder, self.settings.halving
        if ladder is not None:
            plan = L.expand(self.compose, jobs, ladder)
            found, multipliers, owners = L.search(self.compose, plan, self.settings.multipliers)
            return Planned(found, multipliers, plan, owners)
        planned = Planned(*search_lr(self.compose, jobs, self.settings.multipliers))
        if halving is not None:
            for job in planned.jobs:
                if job.cfg is not None:  # a rung that does not fit, the user's pause: one line, before anything is made
                    H.check_pause(job)
                    H.rung_steps(job, halving)
        return planned

    def dry_run(self, planned: Planned, launcher: Optional[dict]) -> None:
        """Print the plan (slm.sweeps.plan), the ladder's rungs and halving's; `launcher`: hydra.launcher as a dict."""
        from slm.sweeps.plan import print_plan

        plan = planned.ladder
        deferred = [e.job for e in plan.deferred] if plan else []
        rows = print_plan(self.name, self.sweep_dir, planned.jobs + deferred, self._estimate(), launcher=launcher,
                          rerun_failed=self.rerun_failed, batch_size=self.batch_size)
        if plan is not None:
            L.print_ladder(plan, rows, {**planned.owners, **{e.job.key: e for e in plan.deferred}},
                           self.settings.multipliers)
        if self.settings.halving is not None:
            H.print_halving(self.settings.halving, planned.jobs, rows, searched=bool(planned.multipliers))

    def _estimate(self) -> dict:
        return asdict(self.settings.estimate)

    def run(self, planned: Planned) -> tuple[list, bool]:
        """Train the planned jobs (halving's rungs, then a ladder's carried rungs) and sum up: (the launcher's returns,
        whether a job failed)."""
        jobs, plan, name = planned.jobs, planned.ladder, self.name
        ladder_info = L.info(plan, planned.owners, searching=bool(self.settings.multipliers)) if plan else None
        noted = P.note_for_workers(name, self.sweep_dir, jobs)
        if plan is not None and plan.deferred:  # the progress lines count this phase's jobs only: say what follows
            print(f"sweep {name}: ladder: {len(jobs)} jobs at the {plan.ladder.search_rungs} searched rung(s) first; "
                  f"{len(plan.deferred)} more at the rungs above once they have ended, at the lr they carry up",
                  flush=True)
        if self.settings.halving is not None:
            returns = self._halve(jobs, planned.multipliers)
        else:
            returns = self._run(jobs, planned.multipliers, ladder_info)
        if plan is not None and plan.deferred:
            carried, more = self._carry(planned)
            returns += more
            jobs = jobs + carried
        outcomes = [J.outcome(j) for j in jobs]  # as the run directories say now, other copies' jobs included
        if noted:
            print(f"sweep {name}: this copy is done; slm-workers sums up the sweep once every copy has ended")
        else:
            P.summarize(name, self.sweep_dir, outcomes)
        return returns, any(o["status"] == J.FAILED for o in outcomes)

    def _halve(self, jobs: list[Job], multipliers: dict[str, float]) -> list:
        from slm.sweeps.store import halving_decisions, save_halving_decisions

        return H.run(self.name, jobs, self.settings.halving,
                     launch=lambda todo, extra: self._run(todo, multipliers, extra=extra),
                     pinned=lambda: halving_decisions(self.sweep_dir),
                     pin=lambda d: save_halving_decisions(self.sweep_dir, d), searched=bool(multipliers))

    def _carry(self, planned: Planned) -> tuple[list[Job], list]:
        """A ladder's upper rungs at the lr carried up from its searched rungs, once they have ended: (their jobs, the
        launcher's returns)."""
        from slm.sweeps.store import carried_lrs, save_carried_lrs

        L.wait_for_others(self.name, planned.jobs)
        pinned = carried_lrs(self.sweep_dir)
        carried, keyed, sources = L.carry(self.compose, planned.ladder, planned.jobs, planned.multipliers,
                                          planned.owners, pinned)
        save_carried_lrs(self.sweep_dir, pinned)
        if not carried:
            return [], []
        P.note_for_workers(self.name, self.sweep_dir, carried)
        return carried, self._run(carried, {}, L.info(planned.ladder, keyed, sources))

    def _run(self, jobs: list[Job], multipliers: dict[str, float], ladder: Optional[dict[str, dict]] = None,
             extra: list[str] = ()) -> list:
        """List the jobs in sweep.json, record those that do not compose, launch the rest that are not settled, each
        with `extra` overrides added at launch (halving's pause, left out of the job key); returns the launcher's
        returns."""
        from slm.sweeps.store import list_jobs

        list_jobs(self.sweep_dir, {j.key: j.overrides for j in jobs}, warn=J.say, lr_multipliers=multipliers,
                  ladder=ladder)
        outcomes = {}
        for job in jobs:
            if J.unreadable(job):
                outcomes[job.key] = J.outcome(job)
                continue
            if job.cfg is None:
                J.record_invalid(job, rerun=self.rerun_failed)
            if job.cfg is None or J.finished(job):
                outcomes[job.key] = J.outcome(job)
        runnable = [replace(j, overrides=j.overrides + list(extra)) for j in jobs if j.key not in outcomes]
        if len(runnable) < len(jobs):
            print(f"sweep {self.name}: launching {len(runnable)} of {len(jobs)} jobs; "
                  f"{J.not_launched(outcomes.values())}")
        if self.one_by_one:
            return self._one_by_one(jobs, runnable)
        returns = []  # Slurm: each batch one job array
        size = self.batch_size or len(runnable) or 1
        for start in range(0, len(runnable), size):
            batch = runnable[start:start + size]
            results = self.launch(batch, start)
            returns.append([value for value, _ in results if value is not None])
            for job, (_, error) in zip(batch, results):
                J.outcome(job, error)  # records a job that died without a record
        return returns

    def _one_by_one(self, jobs: list[Job], runnable: list[Job]) -> list:
        """Launch the jobs one at a time, each with a progress line before and after (the whole sweep's state, from the
        run directories); a job another process has taken or finished meanwhile (a copy of this sweep: slm-workers) is
        passed over."""
        returns = []
        for idx, job in enumerate(runnable):
            if J.taken(job):
                continue
            P.say_progress(P.progress_line(self.name, jobs, job, f"starts ({job.key})", starting=True))
            began = time.monotonic()
            (value, error), = self.launch([job], idx)
            if value is not None:
                returns.append([value])
            outcome = J.outcome(job, error)
            P.say_progress(P.progress_line(self.name, jobs, job, P.ended(outcome, time.monotonic() - began)))
        return returns
