"""The run's link to its Optuna trial (hydra.sweeper.pruner; issue 52), without Lightning: what the Optuna sweeper
writes into a trial's run directory before it launches the job, and the pruners it may name. slm.training.pruning
reads it in the run (ReportToTrial)."""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

TRIAL_FILE = "trial.json"
"""A trial's run directory's link to its Optuna trial (written by the sweeper, read by slm-train)."""
PRUNERS = {"none": "NopPruner", "median": "MedianPruner", "percentile": "PercentilePruner",
           "successive_halving": "SuccessiveHalvingPruner", "hyperband": "HyperbandPruner",
           "threshold": "ThresholdPruner", "patient": "PatientPruner", "wilcoxon": "WilcoxonPruner"}
"""pruner.name -> its class in optuna.pruners (successive_halving is ASHA: Li et al., arXiv 1810.05934)."""


def pruner_error(settings: dict | None) -> str | None:
    """What is wrong with `{name: ..., <the class's own arguments>}` as one line, None where Optuna takes it."""
    cfg = dict(settings or {"name": "none"})
    name = str(cfg.pop("name", "none"))
    if name not in PRUNERS:
        return f"pruner.name {name!r} is not a pruner; choose one of: {', '.join(PRUNERS)}"
    import optuna

    cls = getattr(optuna.pruners, PRUNERS[name])
    try:
        inspect.signature(cls).bind(**cfg)
    except TypeError as err:
        params = [p for p in inspect.signature(cls).parameters if p != "self"]
        return f"pruner {name}: {err}; its arguments: {', '.join(params) or 'none'}"
    try:
        make_pruner({"name": name, **cfg})
    except (TypeError, ValueError) as err:
        return f"pruner {name}: {err}"
    return None


def make_pruner(settings: dict | None):
    """The optuna.pruners object of `{name: ..., <its arguments>}` (None or name none: NopPruner, nothing pruned).
    PatientPruner takes the pruner it wraps as `wrapped_pruner: {name: ..., ...}`."""
    import optuna

    cfg = dict(settings or {"name": "none"})
    name = str(cfg.pop("name", "none"))
    if name == "patient" and isinstance(cfg.get("wrapped_pruner"), dict):
        cfg["wrapped_pruner"] = make_pruner(cfg["wrapped_pruner"])
    return getattr(optuna.pruners, PRUNERS[name])(**cfg)


def open_storage(storage: str):
    """A study's storage: a path (no "://") is a journal file (Optuna's JournalFileBackend, safe for several
    processes on one filesystem), anything else an RDB URL (sqlite:///..., postgresql://...)."""
    if "://" in storage:
        return storage
    import optuna
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(str(Path(storage).resolve())))


@dataclass
class TrialLink:
    """A run's Optuna trial: what ReportToTrial needs to reach it from another process."""

    storage: str
    """The study's storage, as open_storage takes it."""
    study: str
    trial_id: int
    """Optuna's id of the trial in its storage (not its number in the study)."""
    number: int
    pruner: dict
    """{name: ..., <the pruner's arguments>} (make_pruner)."""

    def write(self, run_dir: Path) -> Path:
        """run_dir/trial.json, atomically (the run directory is made where missing)."""
        from slm.atomic import atomic_write

        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / TRIAL_FILE
        atomic_write(path, lambda f: f.write(json.dumps(asdict(self), indent=1).encode()))
        return path

    @classmethod
    def read(cls, run_dir: Path) -> "TrialLink | None":
        """The run directory's link, None without one."""
        path = Path(run_dir) / TRIAL_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(str(data["storage"]), str(data["study"]), int(data["trial_id"]), int(data["number"]),
                   dict(data.get("pruner") or {"name": "none"}))

    def describe(self) -> str:
        """The pruner in words: "successive_halving (min_resource=2, reduction_factor=3)"."""
        cfg = dict(self.pruner)
        name = cfg.pop("name", "none")
        return name + (f" ({', '.join(f'{k}={v}' for k, v in cfg.items())})" if cfg else "")


__all__ = ["PRUNERS", "TRIAL_FILE", "TrialLink", "make_pruner", "open_storage", "pruner_error"]
