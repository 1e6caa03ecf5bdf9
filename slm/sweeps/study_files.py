"""An Optuna sweep's study read back from its sweep directory (read only): where it is stored, its trials, and the
points of its best trials, which a grid sweep reruns at a larger rung (`${slm_top_trials:<sweep dir>,<k>}` in
hydra.sweeper.points; issue 52 §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SUMMARY = "optuna_best.yaml"
"""The sweeper's summary beside the runs: the study's name and storage, its counts and its best trial."""
SAVED_CONFIG = "multirun.yaml"
"""The sweep's config as the sweeper saved it (slm.sweeps.jobs.save_sweep_config)."""


class NoStudy(ValueError):
    """The directory holds no Optuna study (or not the trials asked of it): one line."""


def default_storage(sweep_dir: Path) -> str:
    """The storage of a study whose sweep names none: the SQLite optuna.db of a study begun there before (it keeps
    it), else the journal file optuna.journal, which several drivers can share; absolute, as every process names it."""
    db = Path(sweep_dir) / "optuna.db"
    return f"sqlite:///{db.resolve()}" if db.exists() else str((Path(sweep_dir) / "optuna.journal").resolve())


def study_storage(sweep_dir: Path) -> tuple[str, str, str]:
    """(storage, study name, what named it) of the study run into `sweep_dir`, in the sweeper's own order: the storage
    its summary names (written as each driver ends), else hydra.sweeper.storage in the sweep's saved config
    (multirun.yaml; a relative path from the current directory, as the sweeper read it), else an older study's
    optuna.db, else optuna.journal. NoStudy where none is there."""
    sweep_dir = Path(sweep_dir)
    info = _yaml(sweep_dir / SUMMARY)
    saved = _yaml(sweep_dir / SAVED_CONFIG)
    sweeper = ((saved.get("hydra") or {}).get("sweeper") or {})
    if "optuna" not in str(sweeper.get("_target_", "")).lower():
        sweeper = {}
    name = str(info.get("study") or sweeper.get("study_name") or saved.get("run_group") or sweep_dir.name)
    if info.get("storage"):
        return _here(str(info["storage"]), sweep_dir), name, str(sweep_dir / SUMMARY)
    if sweeper.get("storage"):
        storage = str(sweeper["storage"])
        return (storage if "://" in storage else _here(str(Path(storage).resolve()), sweep_dir)), name, \
            f"hydra.sweeper.storage in {sweep_dir / SAVED_CONFIG}"
    if any((sweep_dir / f).is_file() for f in ("optuna.db", "optuna.journal")):
        storage = default_storage(sweep_dir)
        return storage, name, str(sweep_dir / ("optuna.db" if storage.startswith("sqlite") else "optuna.journal"))
    raise NoStudy(f"{sweep_dir}: no Optuna study there (no optuna.journal, optuna.db, nor a storage named in "
                  f"{SUMMARY} or {SAVED_CONFIG}): run the search into it first (slm-train -m hydra/sweeper=optuna ...)")


def _here(storage: str, sweep_dir: Path) -> str:
    """A recorded storage file that is gone but whose copy lies in the sweep directory (a sweep moved or shipped, as
    docs/search/runs): the copy; anything else as recorded."""
    if "://" in storage or Path(storage).exists() or not (sweep_dir / Path(storage).name).is_file():
        return storage
    return str((sweep_dir / Path(storage).name).resolve())


def _yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else {}
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def load_search(sweep_dir: Path) -> Any:
    """The optuna.Study run into `sweep_dir`."""
    import optuna

    from slm.training.trial_link import open_storage

    storage, name, _ = study_storage(sweep_dir)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=name, storage=open_storage(storage))
    except KeyError:
        raise NoStudy(f"{sweep_dir}: {storage} holds no study named {name!r}") from None


def trial_run_dir(sweep_dir: Path, trial: Any) -> Path | None:
    """The run directory of a trial of the study in `sweep_dir`: its job key (the name the sweeper recorded) under
    `sweep_dir`, wherever the sweep was run from or has been moved to; None for a trial with none."""
    recorded = trial.user_attrs.get("run_dir")
    return Path(sweep_dir) / Path(str(recorded)).name if recorded else None


def top_points(sweep_dir: Path | str, k: int) -> list[list[str]]:
    """The overrides of the study's `k` best complete trials, best first (their search dimensions only: the trial's
    `point`), each configuration once; NoStudy where the study holds fewer."""
    from optuna.trial import TrialState

    study = load_search(Path(str(sweep_dir)))
    done = sorted((t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))),
                  key=lambda t: t.value, reverse=study.direction.name == "MAXIMIZE")
    points: list[list[str]] = []
    for t in done:
        point = [str(o) for o in t.user_attrs.get("point") or []]
        if point and point not in points:
            points.append(point)
    if int(k) < 1 or len(points) < int(k):
        raise NoStudy(f"top {k} trials of {sweep_dir} asked: it holds {len(points)} complete trials with a point "
                      f"(k from 1 to {len(points)})")
    return points[: int(k)]


__all__ = ["NoStudy", "SUMMARY", "default_storage", "load_search", "study_storage", "top_points", "trial_run_dir"]
