"""`hydra/sweeper=optuna`: hyperparameter search with Optuna (>= 4) through its ask/tell interface.

Each trial is one slm-train job with the trial's values as overrides, so it gets its own run directory
(runs/<run_group>/<job key>) and result.json like any sweep job, and any launcher runs it (basic: here,
one trial after another; slurm: `n_jobs` trials per Slurm array). The objective is read from the run's
result.json (`objective`, default eval.val_nll); a failed or diverged trial is told FAIL and the study goes on,
as is a trial whose run directory holds a result.json that cannot be read (it is not launched).

Search space (`params`, Hydra's override syntax; plain values are fixed overrides, null drops a key;
sweep overrides on the command line, e.g. 'train.lr=interval(1e-4,1e-2)', are dimensions too):
    train.lr: tag(log, interval(1e-4, 1e-2))    float, log scale        interval(a, b): uniform
    train.batch_size: choice(8, 16, 32)         categorical (also "8,16,32")
    model.n_layers: range(2, 8, 2)              integers 2, 4, 6 (int distribution with a step)
    train.schedule.warmup_steps: int(interval(0, 500))   integers 0..500 (also tag(int, interval(0, 500)))

The study lives in `storage` (default: the journal file <sweep dir>/optuna.journal, Optuna's JournalFileBackend, or
the optuna.db of a study begun there in SQLite; a path: a journal file; any RDB URL, e.g. postgresql://...).
`n_trials` is the size of the whole study: starting the same command again resumes it, first finishing the trials an
interrupted run left RUNNING (same values, same run directory: their training resumes from its checkpoint), then
asking only for the trials still missing. Several drivers may share a journal or RDB study, with no barrier between
them (slm-workers copies, or hydra.sweeper.workers tasks of one Slurm array): slm.sweeps.study_claims keeps them
apart; a SQLite study has one driver.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.core.plugins import Plugins
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.slm_sweeps import adapter as A
from hydra_plugins.slm_sweeps.compose import compose_job
from slm.atomic import atomic_write
from slm.sweeps import jobs as J
from slm.sweeps.optuna_settings import SAMPLERS, OptunaSettings
from slm.sweeps.optuna_space import Dimension, SearchSpace, conditional_error, grid_sampler
from slm.sweeps.study_files import default_storage
from slm.sweeps.study_claims import Claims, driver_ordinal, next_batch, refuse_unshared, shareable, wait_for_run
from slm.training.trial_link import TrialLink, make_pruner, open_storage

log = logging.getLogger(__name__)


def distribution(override: Override):
    """The Optuna distribution of a sweep override (choice, range, interval; tag `log`)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    sweep = override.value()
    log_scale = "log" in (sweep.tags or set())
    if isinstance(sweep, ChoiceSweep):
        return CategoricalDistribution([v for v in sweep.list])
    if isinstance(sweep, RangeSweep):
        values = list(override.sweep_iterator())
        if all(isinstance(v, int) for v in values):
            return IntDistribution(values[0], values[-1], step=int(sweep.step), log=log_scale and sweep.step == 1)
        return FloatDistribution(values[0], values[-1], step=float(sweep.step))
    if isinstance(sweep, IntervalSweep):
        if "int" in (sweep.tags or set()) or (isinstance(sweep.start, int) and isinstance(sweep.end, int)):
            return IntDistribution(int(sweep.start), int(sweep.end), log=log_scale)
        return FloatDistribution(float(sweep.start), float(sweep.end), log=log_scale)
    raise HydraException(f"optuna sweeper: {override.input_line}: unsupported sweep {type(sweep).__name__}")


def _value_str(value: Any) -> str:
    """A trial value as an override value; floats to 4 significant digits, so job keys stay readable
    (the run's config holds the value actually used)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _select(record: dict, dotted: str) -> Optional[float]:
    node: Any = record
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return float(node) if isinstance(node, (int, float)) and math.isfinite(node) else None


class OptunaSweeper(Sweeper):
    def __init__(self, **keys: Any) -> None:
        with A.refusals_as_hydras():
            settings = OptunaSettings.read({k: A.plain(v) for k, v in keys.items()})
        self.study_name, self.storage, self.direction = settings.study_name, settings.storage, settings.direction
        self.n_trials, self.n_jobs, self.objective = settings.n_trials, settings.n_jobs, settings.objective
        self.workers = settings.workers
        self.sampler_cfg = dict(settings.sampler or {"name": "tpe"})
        self.pruner_cfg = dict(settings.pruner) if settings.prunes() else None
        params = {str(k): v for k, v in (settings.params or {}).items() if v is not None}
        upgraded = A.upgrade_params({k: v for k, v in params.items() if not isinstance(v, dict)})
        self.params = {k: v for k, v in {**params, **upgraded}.items() if k in upgraded or isinstance(v, dict)}
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.launcher = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    # ------------------------------------------------------------------ study
    def _storage(self, sweep_dir: Path) -> str:
        """The study's storage as every process names it: an RDB URL, or a journal file's absolute path. Unset: the
        journal file <sweep dir>/optuna.journal, or the SQLite optuna.db of a study begun there before."""
        if not self.storage:
            return default_storage(sweep_dir)
        return self.storage if "://" in self.storage else str(Path(self.storage).resolve())

    def _sampler(self, n_existing: int, ordinal: int, space: SearchSpace):
        """The sampler; its seed is offset by the trials the study holds already, so that a resumed study does not
        draw its first (random start-up) points again, and by this driver's ordinal among the study's drivers, so
        that drivers started together do not draw the same ones (not the grid sampler's: see below)."""
        import optuna

        cfg = dict(self.sampler_cfg)
        name = str(cfg.pop("name", "tpe"))
        if name == "grid":  # every point once, in an order drawn from the seed: the same seed in every driver and on
            try:            # every resume, since a trial's grid id means a point only under one order
                return grid_sampler(space, cfg.get("seed"))
            except ValueError as err:
                raise HydraException(f"optuna sweeper: hydra.sweeper.sampler.name=grid: {err}") from None
        if cfg.get("seed") is not None:
            cfg["seed"] = int(cfg["seed"]) + n_existing + 7919 * ordinal
        return getattr(optuna.samplers, SAMPLERS[name])(**cfg)

    def _space(self, arguments: List[str]) -> SearchSpace:
        """hydra.sweeper.params, then the command line's sweep overrides, as a SearchSpace (slm.sweeps.optuna_space):
        a string is Hydra's override syntax (a sweep: a dimension; a plain value: a fixed override); a mapping is a
        bundle ({choose: {label: [overrides]}}) or a conditional dimension ({values: <sweep>, when: {...}})."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        dims: Dict[str, Dimension] = {}
        fixed: List[str] = []

        def parse(line: str, when: dict) -> None:
            (override,) = parser.parse_overrides([line])
            key = override.get_key_element()
            if override.is_sweep_override():
                dims[key] = Dimension(key, distribution(override), when)
            elif when:
                raise HydraException(f"optuna sweeper: {key}.values={override.get_value_element_as_str()} is one "
                                     "value: a conditional dimension needs a sweep, e.g. choice(2, 4)")
            else:
                fixed.append(f"{key}={override.get_value_element_as_str()}")

        for key, value in self.params.items():
            if not isinstance(value, dict):
                parse(f"{key}={value}", {})
                continue
            unknown = set(value) - {"values", "choose", "when"}
            if unknown or ("values" in value) == ("choose" in value):
                raise HydraException(f"optuna sweeper: hydra.sweeper.params.{key}={value} is invalid: give a sweep "
                                     "string, {values: <sweep>, when: {...}} or {choose: {<label>: [overrides]}, "
                                     "when: {...}}")
            when = value.get("when")
            if isinstance(when, dict):
                when = {k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in when.items()}
            wrong = conditional_error(key, when, dims) if "when" in value else None
            if wrong:
                raise HydraException(f"optuna sweeper: hydra.sweeper.params.{wrong}")
            if "values" in value:
                parse(f"{key}={value['values']}", when or {})
                continue
            choose = value["choose"]
            if not isinstance(choose, dict) or not choose or not all(isinstance(v, list) for v in choose.values()):
                raise HydraException(f"optuna sweeper: hydra.sweeper.params.{key}.choose={choose} is invalid: give "
                                     "{<label>: [<override>, ...], ...}")
            from optuna.distributions import CategoricalDistribution

            dims[key] = Dimension(key, CategoricalDistribution(list(choose)), when or {},
                                  {str(k): [str(o) for o in v] for k, v in choose.items()})
        for line in arguments:
            parse(line, {})
        if not dims:
            raise HydraException("optuna sweeper: no search space: give hydra.sweeper.params, e.g. "
                                 "'train.lr: tag(log, interval(1e-4, 1e-2))'")
        return SearchSpace(list(dims.values()), fixed)

    # ------------------------------------------------------------------ sweep
    def sweep(self, arguments: List[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        from slm.runs.lock import run_lock
        from slm.sweeps.progress import copies

        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        storage = self._storage(sweep_dir)
        drivers = max(self.workers, copies() or 1)
        refused = refuse_unshared(storage, drivers)
        if refused:
            raise HydraException(f"optuna sweeper: {refused}")
        if self.workers > 1 and not hasattr(self.launcher, "submit_workers"):
            raise HydraException(f"optuna sweeper: hydra.sweeper.workers={self.workers} submits the workers as one "
                                 "Slurm array: add hydra/launcher=slurm; locally run the command in copies instead, "
                                 f"slm-workers {self.workers} -- slm-train -m ... (and workers=1)")
        sweep_dir.mkdir(parents=True, exist_ok=True)
        name = self.study_name or str(self.config.get("run_group", sweep_dir.name))
        if shareable(storage):
            return self._optimize(arguments, sweep_dir, name, storage)
        with run_lock(sweep_dir, attempts=1, name=".optuna.lock") as held:  # SQLite: one driver
            if not held:
                raise HydraException(f"optuna sweeper: another driver runs the study in {storage}: "
                                     f"{refuse_unshared(storage, 2)}")
            return self._optimize(arguments, sweep_dir, name, storage)

    def _optimize(self, arguments: List[str], sweep_dir: Path, name: str, storage: str) -> list:
        import optuna

        space = self._space(arguments)
        try:
            self._sampler(0, 0, space)  # a sampler the settings cannot make: refused before the study is made
        except (TypeError, ValueError) as err:
            raise HydraException(f"optuna sweeper: hydra.sweeper.sampler={self.sampler_cfg}: {err}") from None
        J.save_sweep_config(OmegaConf.to_yaml(self.config).encode(), sweep_dir)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        claims = Claims(sweep_dir)
        with claims.asking():  # one driver creates the study; the others load it
            study = optuna.create_study(study_name=name, storage=open_storage(storage), direction=self.direction,
                                        load_if_exists=True, pruner=make_pruner(self.pruner_cfg))
            n_existing = len(study.get_trials(deepcopy=False))
            ordinal = driver_ordinal(study)
        if self.workers > 1:
            return self._workers(study, sweep_dir, name)
        study.sampler = self._sampler(n_existing, ordinal, space)
        returns, job_idx = [], 0
        while True:
            batch, resumed = next_batch(study, space.sample, self.n_trials, self.n_jobs, claims)
            if resumed:
                log.info(f"optuna: resuming {len(resumed)} interrupted trial(s): {resumed}")
            if not batch:
                break
            try:
                returns.append(self._run_batch(study, batch, space, job_idx, storage))
            finally:
                claims.release_all()
            job_idx += len(batch)
        self._report(study, sweep_dir, name)
        return returns

    def _workers(self, study, sweep_dir: Path, name: str) -> list:
        """hydra.sweeper.workers > 1: submit the workers as one Slurm array (each this command as one driver with
        the basic launcher, slm.sweeps.study_claims), wait for them, and report the study."""
        hydra_overrides = [o for o in self.config.hydra.overrides.hydra
                           if not o.startswith(("hydra/launcher=", "hydra.launcher.", "hydra.sweeper.workers=",
                                                "hydra.sweeper.n_jobs="))]
        argv = ["-m", *hydra_overrides, *self.config.hydra.overrides.task, "hydra/launcher=basic",
                "hydra.sweeper.workers=1", "hydra.sweeper.n_jobs=1"]
        self.launcher.submit_workers(argv, self.workers)
        self._report(study, sweep_dir, name)
        return []

    def _run_batch(self, study, batch, space: SearchSpace, job_idx: int, storage: str) -> list:
        from optuna.trial import TrialState

        from slm.runs.record import load_record

        loader = self.hydra_context.config_loader
        by_dir: Dict[Path, J.Job] = {}
        trial_jobs = []
        for trial in batch:
            if not space.matches(trial.params):  # a resumed trial asked under another search space
                trial.set_user_attr("error", f"search space changed since this trial was asked: {sorted(trial.params)}")
                study.tell(trial, state=TrialState.FAIL)
                continue
            overrides = space.overrides(trial.params, _value_str)
            job = compose_job(loader, self.config, overrides)
            job = by_dir.setdefault(job.run_dir, job)  # equal values: one run serves both trials
            trial.set_user_attr("run_dir", str(job.run_dir.resolve()))
            trial.set_user_attr("overrides", overrides)
            trial.set_user_attr("point", space.point(trial.params, _value_str))
            trial_jobs.append((trial, job))
        jobs = list(by_dir.values())
        skipped = {j.run_dir for j in jobs if J.unreadable(j)}
        for job in jobs:
            if job.cfg is None and job.run_dir not in skipped:
                J.record_invalid(job, rerun=bool(self.config.get("rerun_failed", False)))
        candidates = [j for j in jobs if j.cfg is not None and j.run_dir not in skipped]
        for job in candidates:  # trained by another process: another driver's trial of the same values, or the
            wait_for_run(job.run_dir)  # Slurm job of a driver that is gone; then its record tells the trial
        runnable = [j for j in candidates if not J.finished(j)]
        if self.pruner_cfg is not None:  # the run reports each validation to its trial (slm.training.pruning)
            first = {}
            for trial, job in trial_jobs:
                first.setdefault(job.run_dir, trial)
            for job in runnable:
                trial = first[job.run_dir]
                TrialLink(storage, study.study_name, trial._trial_id, trial.number, self.pruner_cfg).write(job.run_dir)
        results = A.launch(self.launcher, runnable, job_idx) if runnable else []
        outcomes = {j.run_dir: J.outcome(j, error) for j, (_, error) in zip(runnable, results)}
        outcomes.update({j.run_dir: J.outcome(j) for j in jobs if j.run_dir not in outcomes})
        for trial, job in trial_jobs:
            o = outcomes[job.run_dir]
            value = _select(load_record(job.run_dir) or {}, self.objective) if o["status"] == "completed" else None
            trial.set_user_attr("status", o["status"])
            if o["status"] == "pruned":  # its pruner stopped it at a validation: final, not failed
                pruned = (load_record(job.run_dir) or {}).get("pruner") or {}
                trial.set_user_attr("pruned", pruned.get("reason") or "pruned")
                study.tell(trial, state=TrialState.PRUNED)
                self._progress(study, trial, f"pruned: {pruned.get('reason') or ''}")
            elif value is None:
                trial.set_user_attr("error", o["error"] or f"no finite {self.objective} in result.json")
                study.tell(trial, state=TrialState.FAIL)
                self._progress(study, trial, f"{o['status']}: {o['error'] or ''}")
            else:
                study.tell(trial, value)
                self._progress(study, trial, f"completed: {self.objective}={value:.5g}")
        return [r for r, _ in results if r is not None]

    def _progress(self, study, trial, what: str) -> None:
        """One line per trial as it ends, as the grid sweeper prints one per job: "optuna study s: trial 3 of 20
        pruned: ...; 1 complete, 1 pruned, 0 failed; best #1 eval.val_nll=3.7534" (trial numbers from 1, as the
        summary's line; optuna_best.yaml keeps Optuna's, from 0)."""
        from optuna.trial import TrialState

        trials = study.get_trials(deepcopy=False)
        count = {state: sum(t.state == state for t in trials) for state in (TrialState.COMPLETE, TrialState.PRUNED,
                                                                             TrialState.FAIL)}
        line = (f"optuna study {study.study_name}: trial {trial.number + 1} of {self.n_trials} {what}; "
                f"{count[TrialState.COMPLETE]} complete, {count[TrialState.PRUNED]} pruned, {count[TrialState.FAIL]} "
                "failed")
        if count[TrialState.COMPLETE]:
            best = study.best_trial
            line += f"; best #{best.number + 1} {self.objective}={best.value:.5g}"
        print(line, flush=True)

    def _report(self, study, sweep_dir: Path, name: str) -> None:
        from optuna.trial import TrialState

        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        failed = [t for t in trials if t.state == TrialState.FAIL]
        pruned = [t for t in trials if t.state == TrialState.PRUNED]
        running = [t for t in trials if t.state == TrialState.RUNNING]  # other drivers' (or left by one that is gone)
        summary: Dict[str, Any] = {"study": name, "n_trials": len(trials), "complete": len(done), "failed": len(failed),
                                   "pruned": len(pruned), "running": len(running), "objective": self.objective,
                                   "direction": self.direction, "storage": self._storage(sweep_dir),
                                   "sampler": self.sampler_cfg, "pruner": self.pruner_cfg or {"name": "none"}}
        if done:
            best = study.best_trial
            summary.update(best_trial=best.number, best_value=best.value, best_params=best.params,
                           best_run_dir=best.user_attrs.get("run_dir"))
        text = yaml.safe_dump(summary, sort_keys=False).encode()
        atomic_write(sweep_dir / "optuna_best.yaml", lambda f: f.write(text))  # drivers of one study may end together
        line = (f"optuna study {name}: {len(trials)} trial{'' if len(trials) == 1 else 's'}: {len(done)} complete, "
                f"{len(pruned)} pruned, {len(failed)} failed" + (f", {len(running)} running" if running else ""))
        if done:
            line += (f"; best #{summary['best_trial'] + 1} {self.objective}={summary['best_value']:.5g} "
                     f"{summary['best_params']}")
        print(f"{line} (details: {sweep_dir / 'optuna_best.yaml'}, slm-status {sweep_dir})")
        if not done and not running:
            sys.stdout.flush()
            sys.exit(1)
