"""`hydra/sweeper=grid` (slm's default): Hydra's basic sweeper plus paired points, per-job outcomes and a
dry run.

    hydra.sweeper.params   crossed axes, as in Hydra's basic sweeper ("model.n_layers: 4,8,16")
    hydra.sweeper.points   paired axes: a list of override lists, one job per point, crossed with params
                           (e.g. [[model.n_layers=4, model.d_model=768], [model.n_layers=12, model.d_model=512]])
    hydra.sweeper.lr_search  multipliers of each point's learning rate (e.g. [0.25,0.5,1,2,4]): every job runs
                           at train.lr x each of them, an lr axis per point (1 is always run: the point's own
                           lr, the shared lr the analysis compares against; analysis.tuning takes each
                           configuration at its best lr and flags a best lr at the edge of the grid)
    hydra.sweeper.ladder   every job at several rungs of scale (parameter budgets, tokens per parameter, an lr rule:
                           searched per rung or carried up from the lowest; hydra_plugins/slm_sweeps/ladder.py)
    hydra.sweeper.halving  successive halving: every job trains a rung's fraction of its steps, and only the best 1/eta
                           of the configurations go on to the next (hydra_plugins/slm_sweeps/halving.py); the others
                           are recorded `pruned`
    hydra.sweeper.dry_run  print the job list with parameter counts, tokens and GPU-hours (and with a Slurm launcher
                           what would be submitted: plan.slurm_lines); train nothing

Every job is composed before anything is launched: a job whose overrides do not compose is recorded
failed in its run directory (the others still run), jobs that name the same run directory run once, and
jobs already completed (or failed or diverged, unless rerun_failed=true) are not launched at all, nor is
a job whose result.json cannot be read (one line on stderr; it is `unreadable` in the summary).
After the sweep one line sums up the outcomes read from the jobs' result.json files, with a line per
failed or diverged job; the command exits 1 if a job failed. The launcher is whatever hydra/launcher
names (basic: in this process, one job after another; slurm: a Slurm array, hydra.sweeper.max_batch_size jobs at a
time).

With the basic launcher each job is launched on its own, with a progress line before and after it (`job i of n`,
the whole sweep's counts and the time left: jobs.progress_line), read from the run directories between jobs; a job
that another process has taken or finished since the sweep began (a copy of the sweep: slm-workers) is passed over.
Under slm-workers with more than one copy a copy ends with one line instead of the summary, which slm-workers
prints once every copy has ended (jobs.note_for_workers).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from hydra_plugins.slm_sweeps import jobs as J
from hydra_plugins.slm_sweeps import halving as H
from hydra_plugins.slm_sweeps import ladder as L
from hydra_plugins.slm_sweeps.compose import Composer


class GridSweeper(BasicSweeper):
    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None,
                 points: Optional[List[List[str]]] = None, dry_run: bool = False,
                 estimate: Optional[Dict[str, Any]] = None, lr_search: Optional[List[float]] = None,
                 ladder: Optional[Dict[str, Any]] = None, halving: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(max_batch_size=max_batch_size, params=J.upgrade_params(dict(params or {})))
        self.points = [J.upgrade_point(point, i) for i, point in enumerate(points or [])]
        self.lr_search = J.lr_multipliers(lr_search)
        self.ladder = L.parse(ladder, self.lr_search)
        self.halving = H.parse(halving, self.ladder)
        self.dry_run = bool(dry_run)
        self.estimate = dict(estimate or {})

    def job_overrides(self, arguments: List[str]) -> List[List[str]]:
        """Every job's overrides: the crossed params and command-line sweeps, times the points."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        crossed = self.split_arguments(parser.parse_overrides(self._parse_config() + list(arguments)), None)[0]
        for point in self.points:
            if any(o.is_sweep_override() for o in parser.parse_overrides(point)):
                raise HydraException(f"hydra.sweeper.points: {point} sweeps; a point holds single values only")
        return [J.with_point(combo, point, i) for combo in crossed for i, point in enumerate(self.points or [[]])]

    def sweep(self, arguments: List[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        compose = Composer(self.hydra_context.config_loader, self.config)
        # the sweep's own settings (run group, top-level keys, a config file's old spellings) are checked as the
        # sweep directory is named: a refusal comes before any job is composed or any directory made
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        name = str(self.config.get("run_group", sweep_dir.name))
        jobs, multipliers, plan, owners = self.planned(arguments, compose)
        if self.halving is not None:
            for job in jobs:
                if job.cfg is not None:  # a rung that does not fit, the user's pause: one line, before anything is made
                    H.check_pause(job)
                    H.rung_steps(job, self.halving)
        if self.dry_run:
            from hydra_plugins.slm_sweeps.plan import print_plan

            deferred = [e.job for e in plan.deferred] if plan else []
            rows = print_plan(name, sweep_dir, jobs + deferred, self.estimate, launcher=self.config.hydra.launcher,
                              rerun_failed=bool(self.config.get("rerun_failed", False)), batch_size=self.batch_size())
            if plan is not None:
                L.print_ladder(plan, rows, {**owners, **{e.job.key: e for e in plan.deferred}}, self.lr_search)
            if self.halving is not None:
                H.print_halving(self.halving, jobs, rows, searched=bool(multipliers))
            return []

        sweep_dir.mkdir(parents=True, exist_ok=True)
        J.save_sweep_config(self.config, sweep_dir)
        ladder_info = L.info(plan, owners, searching=bool(self.lr_search)) if plan else None
        noted = J.note_for_workers(name, sweep_dir, jobs)
        if plan is not None and plan.deferred:  # the progress lines count this phase's jobs only: say what follows
            print(f"sweep {name}: ladder: {len(jobs)} jobs at the {plan.ladder.search_rungs} searched rung(s) first; "
                  f"{len(plan.deferred)} more at the rungs above once they have ended, at the lr they carry up",
                  flush=True)
        if self.halving is not None:
            from slm.sweeps.store import halving_decisions, save_halving_decisions

            returns = H.run(name, jobs, self.halving,
                            launch=lambda todo, extra: self._run(name, sweep_dir, todo, multipliers, extra=extra),
                            pinned=lambda: halving_decisions(sweep_dir),
                            pin=lambda d: save_halving_decisions(sweep_dir, d), searched=bool(multipliers))
        else:
            returns = self._run(name, sweep_dir, jobs, multipliers, ladder_info)
        if plan is not None and plan.deferred:
            from slm.sweeps.store import carried_lrs, save_carried_lrs

            L.wait_for_others(name, jobs)
            pinned = carried_lrs(sweep_dir)
            carried, keyed, sources = L.carry(compose, plan, jobs, multipliers, owners, pinned)
            save_carried_lrs(sweep_dir, pinned)
            if carried:
                J.note_for_workers(name, sweep_dir, carried)
                returns += self._run(name, sweep_dir, carried, {}, L.info(plan, keyed, sources))
                jobs = jobs + carried
        outcomes = [J.outcome(j) for j in jobs]  # as the run directories say now, other copies' jobs included
        if noted:
            print(f"sweep {name}: this copy is done; slm-workers sums up the sweep once every copy has ended")
        else:
            J.summarize(name, sweep_dir, outcomes)
        if any(o["status"] == J.FAILED for o in outcomes):
            sys.stdout.flush()
            sys.exit(1)
        return returns

    def planned(self, arguments: List[str], compose: Callable[[List[str]], J.Job]) -> tuple:
        """The jobs to launch first, composed (compose.Composer): (jobs, {key: lr multiplier}, the ladder's Plan or
        None, {key: its ladder RungJob})."""
        jobs = J.unique([compose(o) for o in self.job_overrides(arguments)])
        plan, owners = None, {}
        if self.ladder is not None:
            plan = L.expand(compose, jobs, self.ladder)
            jobs, multipliers, owners = L.search(compose, plan, self.lr_search)
        else:
            jobs, multipliers = J.search_lr(compose, jobs, self.lr_search)
        return jobs, multipliers, plan, owners

    def _run(self, name: str, sweep_dir: Path, jobs: List[J.Job], multipliers: Dict[str, float],
             ladder: Optional[Dict[str, dict]] = None, extra: List[str] = ()) -> list:
        """List the jobs in sweep.json, record those that do not compose, launch the rest that are not settled, each
        with `extra` overrides added at launch (halving's pause, left out of the job key); returns the launcher's
        returns."""
        from slm.sweeps.store import list_jobs

        list_jobs(sweep_dir, {j.key: j.overrides for j in jobs}, warn=J.say, lr_multipliers=multipliers, ladder=ladder)
        outcomes = {}
        for job in jobs:
            if J.unreadable(job):
                outcomes[job.key] = J.outcome(job)
                continue
            if job.cfg is None:
                J.record_invalid(job, rerun=bool(self.config.get("rerun_failed", False)))
            if job.cfg is None or J.finished(job):
                outcomes[job.key] = J.outcome(job)
        runnable = [replace(j, overrides=j.overrides + list(extra)) for j in jobs if j.key not in outcomes]
        if len(runnable) < len(jobs):
            print(f"sweep {name}: launching {len(runnable)} of {len(jobs)} jobs; {J.not_launched(outcomes.values())}")
        if isinstance(self.launcher, BasicLauncher):
            return self._one_by_one(name, jobs, runnable)
        returns = []  # Slurm: each batch one job array
        size = self.batch_size() or len(runnable) or 1
        for start in range(0, len(runnable), size):
            batch = runnable[start:start + size]
            results = J.launch(self.launcher, batch, initial_job_idx=start)
            returns.append([r for r in results if r is not None])
            for job, ret in zip(batch, results):
                J.outcome(job, ret)  # records a job that died without a record
        return returns

    def batch_size(self) -> Optional[int]:
        """Jobs per Slurm array: hydra.sweeper.max_batch_size, else the cluster's MaxArraySize when the launcher knows
        it (an array over it is refused by sbatch), else None (all in one)."""
        if self.max_batch_size:
            return self.max_batch_size
        limit = getattr(self.launcher, "array_limit", None)
        return limit() if callable(limit) else None

    def _one_by_one(self, name: str, jobs: List[J.Job], runnable: List[J.Job]) -> list:
        """Launch the jobs in this process one at a time, each with a progress line before and after (the whole
        sweep's state, from the run directories); a job another process has taken or finished meanwhile (a copy of
        this sweep: slm-workers) is passed over."""
        returns = []
        # Hydra's basic launcher logs "Launching 1 jobs locally" and "#i : <overrides>" for every job: slm's own line
        # above says both. Its warnings and errors still show.
        logging.getLogger("hydra._internal.core_plugins.basic_launcher").setLevel(logging.WARNING)
        for idx, job in enumerate(runnable):
            if J.taken(job):
                continue
            J.say_progress(J.progress_line(name, jobs, job, f"starts ({job.key})", starting=True))
            began = time.monotonic()
            ret, = J.launch(self.launcher, [job], initial_job_idx=idx)
            if ret is not None:
                returns.append([ret])
            outcome = J.outcome(job, ret)
            J.say_progress(J.progress_line(name, jobs, job, J.ended(outcome, time.monotonic() - began)))
        return returns
