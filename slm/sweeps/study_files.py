"""An Optuna sweep's study read back from its sweep directory (read only): where it is stored, its trials, and the
points of its best trials, which a grid sweep reruns at a larger rung (`${slm_top_trials:<sweep dir>,<k>}` in
hydra.sweeper.points; issue 52 §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SUMMARY = "optuna_best.yaml"
"""The sweeper's summary beside the runs: the study's name and storage, its counts and its best trial."""


class NoStudy(ValueError):
    """The directory holds no Optuna study (or not the trials asked of it): one line."""


def study_storage(sweep_dir: Path) -> tuple[str, str]:
    """(storage, study name) of the study run into `sweep_dir`: as the sweeper's summary names them, else the default
    files (optuna.journal, an older optuna.db) and the directory's name."""
    sweep_dir = Path(sweep_dir)
    summary = sweep_dir / SUMMARY
    info: dict = yaml.safe_load(summary.read_text()) or {} if summary.exists() else {}
    name = str(info.get("study") or sweep_dir.name)
    if info.get("storage"):
        return str(info["storage"]), name
    for file, storage in (("optuna.journal", str((sweep_dir / "optuna.journal").resolve())),
                          ("optuna.db", f"sqlite:///{(sweep_dir / 'optuna.db').resolve()}")):
        if (sweep_dir / file).exists():
            return storage, name
    raise NoStudy(f"{sweep_dir}: no Optuna study there (no {SUMMARY}, optuna.journal or optuna.db): run the search "
                  "into it first (slm-train -m hydra/sweeper=optuna ...)")


def load_search(sweep_dir: Path) -> Any:
    """The optuna.Study run into `sweep_dir`."""
    import optuna

    from slm.training.trial_link import open_storage

    storage, name = study_storage(sweep_dir)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=name, storage=open_storage(storage))
    except KeyError:
        raise NoStudy(f"{sweep_dir}: {storage} holds no study named {name!r}") from None


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


__all__ = ["NoStudy", "SUMMARY", "load_search", "study_storage", "top_points"]
