"""`hydra/sweeper=grid` (slm's default): Hydra's basic sweeper plus paired points, per-job outcomes and a dry run.

An adapter: its keys (hydra.sweeper.*, slm.sweeps.settings.SweepSettings: params, points, lr_search, ladder,
halving, dry_run, estimate, max_batch_size) are settled by the settings protocol; Hydra's overrides become each job's
overrides (the crossed params and command-line sweeps, times the points); slm.sweeps.grid.GridSweep plans, dry-runs
or runs them, composing each job with compose.Composer and launching through whatever hydra/launcher names (basic: in
this process, one job after another with progress lines; slurm: a Slurm array, max_batch_size jobs at a time). After
the sweep one line sums up the outcomes; the command exits 1 if a job failed. Under slm-workers with more than one
copy a copy ends with one line instead of the summary, which slm-workers prints once every copy has ended.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf

from hydra_plugins.slm_sweeps import adapter as A
from hydra_plugins.slm_sweeps.compose import Composer
from slm.sweeps.grid import GridSweep, Planned
from slm.sweeps.jobs import Job, save_sweep_config
from slm.sweeps.settings import SweepSettings


class GridSweeper(BasicSweeper):
    def __init__(self, **keys: Any) -> None:
        from slm.sweeps.optuna_settings import optuna_only

        theirs = optuna_only(keys)
        if theirs:  # a sweep file of the Optuna sweeper's, run without it (a sweep file cannot choose its sweeper)
            raise HydraException(f"hydra.sweeper.{theirs[0]} is the Optuna sweeper's: add hydra/sweeper=optuna "
                                 "to the command (a sweep file cannot choose its sweeper: the main config picks grid)")
        with A.refusals_as_hydras():
            self.settings = SweepSettings.read({k: A.plain(v) for k, v in keys.items()})
        super().__init__(max_batch_size=self.settings.max_batch_size,
                         params=A.upgrade_params(dict(self.settings.params or {})))
        self.points = [A.upgrade_point(point, i) for i, point in enumerate(self.settings.points or [])]

    def job_overrides(self, arguments: List[str]) -> List[List[str]]:
        """Every job's overrides: the crossed params and command-line sweeps, times the points."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        crossed = self.split_arguments(parser.parse_overrides(self._parse_config() + list(arguments)), None)[0]
        for point in self.points:
            if any(o.is_sweep_override() for o in parser.parse_overrides(point)):
                raise HydraException(f"hydra.sweeper.points: {point} sweeps; a point holds single values only")
        return [A.with_point(combo, point, i) for combo in crossed for i, point in enumerate(self.points or [[]])]

    def sweep(self, arguments: List[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        if isinstance(self.launcher, BasicLauncher):  # "Launching 1 jobs locally", "#i : <overrides>": slm's lines say both
            logging.getLogger("hydra._internal.core_plugins.basic_launcher").setLevel(logging.WARNING)
        grid = self.grid(Composer(self.hydra_context.config_loader, self.config))
        with A.refusals_as_hydras():
            planned = grid.plan(self.job_overrides(arguments))
            if self.settings.dry_run:
                grid.dry_run(planned, A.launcher_settings(self.config.hydra.launcher))
                return []
            grid.sweep_dir.mkdir(parents=True, exist_ok=True)
            save_sweep_config(OmegaConf.to_yaml(self.config).encode(), grid.sweep_dir)
            returns, failed = grid.run(planned)
        if failed:
            sys.stdout.flush()
            sys.exit(1)
        return returns

    def grid(self, compose: Callable[[List[str]], Job]) -> GridSweep:
        """The sweep in slm.sweeps: its settings, name and directory, `compose` (overrides -> Job) and the launcher.
        The sweep's own settings (run group, top-level keys, a config file's old spellings) are checked as the sweep
        directory is named: a refusal comes before any job is composed or any directory made."""
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        return GridSweep(self.settings, str(self.config.get("run_group", sweep_dir.name)), sweep_dir, compose,
                         lambda jobs, idx: A.launch(self.launcher, jobs, idx),
                         rerun_failed=bool(self.config.get("rerun_failed", False)),
                         one_by_one=isinstance(self.launcher, BasicLauncher), batch_size=self.batch_size())

    def planned(self, arguments: List[str], compose: Callable[[List[str]], Job]) -> Planned:
        """The jobs to launch first, composed by `compose` (GridSweep.plan)."""
        with A.refusals_as_hydras():
            return self.grid(compose).plan(self.job_overrides(arguments))

    def batch_size(self) -> Optional[int]:
        """Jobs per Slurm array: hydra.sweeper.max_batch_size, else the cluster's MaxArraySize when the launcher knows
        it (an array over it is refused by sbatch), else None (all in one)."""
        if self.max_batch_size:
            return self.max_batch_size
        limit = getattr(self.launcher, "array_limit", None)
        return limit() if callable(limit) else None
