"""`hydra.sweeper.*` of the Optuna sweeper (hydra/sweeper=optuna, conf/hydra/sweeper/optuna.yaml): the study, its
storage, direction and objective, how many trials and how many at once, the sampler and the search space."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from slm.settings import Settings, require, setting

KEY = "hydra.sweeper"
SAMPLERS = {"tpe": "TPESampler", "random": "RandomSampler", "cmaes": "CmaEsSampler", "qmc": "QMCSampler",
            "gp": "GPSampler", "nsga2": "NSGAIISampler", "grid": "GridSampler"}
"""sampler.name -> its class in optuna.samplers."""


@dataclass
class OptunaSettings(Settings):
    """`hydra.sweeper` of the Optuna sweeper (hydra_plugins/slm_optuna_sweeper)."""

    study_name: Optional[str] = None
    """The study's name; null: the run group."""
    storage: Optional[str] = None
    """null: a journal file, <sweep dir>/optuna.journal (or the SQLite <sweep dir>/optuna.db of a study begun there
    before); a path: a journal file; or an RDB URL. SQLite (sqlite:///...) takes one driver only."""
    direction: Literal["minimize", "maximize"] = "minimize"
    """Whether the objective is minimised or maximised."""
    objective: str = "eval.val_nll"
    """The dotted path into each run's result.json that is optimised."""
    n_trials: int = setting(20, gt=0)
    """Trials in the whole study (counting those of earlier, interrupted runs)."""
    n_jobs: int = setting(1, gt=0)
    """Trials this driver launches at once (one Slurm array of n_jobs with hydra/launcher=slurm), told together."""
    workers: int = setting(1, gt=0)
    """Drivers sharing the study with no barrier (each asks, trains, tells, asks again): >1 needs
    hydra/launcher=slurm, which submits them as one array of worker tasks and waits; locally run the command in
    copies instead (slm-workers N -- slm-train -m ...). slm.sweeps.study_claims."""
    halving: Optional[Any] = None
    """The grid sweeper's successive halving: refused here (Optuna asks its trials one by one)."""
    sampler: Optional[dict[str, Any]] = field(default_factory=lambda: {"name": "tpe"})
    """{name: tpe | random | cmaes | qmc | gp | nsga2 | grid, ...}: the other keys go to the sampler class (grid: every
    point of a space of choices once, in an order drawn from its seed)."""
    params: Optional[dict[str, Any]] = None
    """The search space (Hydra's override syntax); plain values are fixed overrides; null drops a key; a mapping is a
    bundle {choose: {label: [overrides]}} or a conditional {values: <sweep>, when: {dimension: value(s)}}
    (slm.sweeps.optuna_space)."""
    pruner: Optional[dict[str, Any]] = None
    """{name: none | median | percentile | successive_halving | hyperband | threshold | patient | wilcoxon, <the
    Optuna class's own arguments>}: each validation of a trial is reported at its step and the trial stops where
    the pruner says (recorded `pruned`; slm.training.pruning). successive_halving is ASHA. Needs the objective
    eval.val_nll, minimised (the validation curve is what is reported). null: none."""

    def check(self, key: str, root) -> None:
        from slm.training.trial_link import pruner_error

        name = (self.sampler or {}).get("name", "tpe")
        require((self.halving is None, f"{key}.halving", self.halving, "the grid sweeper's (successive halving over its "
                 "grid); Optuna prunes its trials with hydra.sweeper.pruner: drop halving, or use hydra/sweeper=grid"),
                (name in SAMPLERS, f"{key}.sampler.name", name, f"choose one of: {', '.join(SAMPLERS)}"))
        if not self.prunes():
            return
        wrong = pruner_error(self.pruner)
        require((wrong is None, f"{key}.pruner", self.pruner, wrong or ""),
                (self.objective == "eval.val_nll" and self.direction == "minimize", f"{key}.objective",
                 f"{self.objective} ({self.direction})", "a pruner judges each trial's validation curve "
                 "(val_nll at each validation): the objective must be eval.val_nll, minimised, or the pruner null"))

    def prunes(self) -> bool:
        """Whether a pruner other than none is set."""
        return bool(self.pruner) and str((self.pruner or {}).get("name", "none")) != "none"

    @classmethod
    def read(cls, node: dict) -> "OptunaSettings":
        """The settings from the sweeper's keys (plain values), settled: SettingsError for a bad one."""
        settings = cls.from_node(node, KEY)
        settings.settle(KEY)
        return settings


def optuna_only(keys) -> list[str]:
    """Those of `keys` (hydra.sweeper's) that only the Optuna sweeper has (pruner, n_trials, ...), sorted: given to the
    grid sweeper they mean hydra/sweeper=optuna was left out."""
    from dataclasses import fields

    from slm.sweeps.settings import SweepSettings

    return sorted(({f.name for f in fields(OptunaSettings)} - {f.name for f in fields(SweepSettings)}) & set(keys))

