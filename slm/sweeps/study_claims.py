"""An Optuna study that several drivers share, with no barrier between them (issue 52, §2): slm-workers copies of one
`slm-train -m hydra/sweeper=optuna` command, or the tasks of a Slurm array of workers (hydra.sweeper.workers).

Each driver asks for its trial, trains it, tells it and asks again; none waits for another's trial (an asynchronous
pruner such as ASHA judges each report against what its rung holds so far). What keeps them apart is slm's, not
Optuna's:
- **A claim per trial:** an flock on <sweep dir>/.optuna/trial-<number>.lock, held by the driver that runs the trial
  from the moment it is asked (or taken up again) until it is told. The kernel lets go of it however the driver ends
  (a kill, a preemption, a node lost with its NFS lock lease), so a RUNNING trial nobody claims is one whose driver is
  gone: the next driver to ask takes it up, with its own values and run directory, and its run resumes from its
  checkpoint. It is not failed and asked again as a new trial (Optuna's heartbeat would do that, and only on RDB
  storage).
- **One asker at a time:** the scan for unclaimed trials, the asks and the claims happen under <sweep dir>/.optuna/
  ask.lock, so two drivers never take up one trial, and the study never asks more than n_trials.
- **Storage they can share:** a journal file (Optuna's JournalFileBackend: appends under a lock that holds on NFS) or
  an RDB server. SQLite on a shared filesystem loses writes under concurrent drivers (optuna#6036): a study in SQLite
  has one driver, and a second one is refused.

The run directory stays the job key of the trial's values, so two trials with equal values share one run: a driver
whose run is trained by another process waits for it and reads its record (wait_for_run)."""

from __future__ import annotations

import fcntl
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from slm.runs.lock import lock_held

CLAIMS_DIR = ".optuna"
"""Under the sweep directory: ask.lock and one trial-<number>.lock per trial a driver holds."""
log = logging.getLogger(__name__)


def shareable(storage: str) -> bool:
    """Whether several drivers may write the study's storage at once: a journal file or an RDB server, not SQLite."""
    return not storage.startswith("sqlite")


def refuse_unshared(storage: str, workers: int) -> str | None:
    """One line where `workers` drivers (more than one) would share a storage they cannot, else None."""
    if workers <= 1 or shareable(storage):
        return None
    return (f"storage {storage} cannot be shared by {workers} drivers: SQLite loses writes when processes on a "
            "shared filesystem write it at once (optuna#6036); give hydra.sweeper.storage=<path>.journal (a journal "
            "file on the filesystem every worker sees; the default for a new study) or an RDB URL "
            "(postgresql://..., mysql://...)")


class Claims:
    """This driver's claims on the trials of the study kept in `sweep_dir` (see the module's docstring)."""

    def __init__(self, sweep_dir: Path) -> None:
        self.dir = Path(sweep_dir) / CLAIMS_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self._held: dict[int, int] = {}  # trial number -> the open, flock-ed descriptor of its claim

    @contextmanager
    def asking(self) -> Iterator[None]:
        """Hold ask.lock for the block (waiting for the driver that holds it: an ask takes well under a second)."""
        fd = os.open(self.dir / "ask.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def take(self, number: int) -> bool:
        """Claim trial `number` for this driver; False where another live driver holds it."""
        if number in self._held:  # this driver's already
            return False
        fd = os.open(self.dir / f"trial-{number}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._held[number] = fd
        return True

    def release(self, number: int) -> None:
        """Let go of trial `number` (told, or found told by another driver) and remove its claim file; a driver that
        opened the file meanwhile finds the trial told when it looks again (next_batch)."""
        fd = self._held.pop(number, None)
        if fd is not None:
            (self.dir / f"trial-{number}.lock").unlink(missing_ok=True)
            os.close(fd)

    def release_all(self) -> None:
        for number in list(self._held):
            self.release(number)


def next_batch(study: Any, sample: Callable[[Any], None], n_trials: int, n_jobs: int,
               claims: Claims) -> tuple[list, list[int]]:
    """Up to `n_jobs` trials for this driver, claimed: first those RUNNING that no driver claims (their driver is
    gone: taken up with their own values), then new ones asked of the study while it holds fewer than `n_trials`
    trials in all (every driver's, whatever their state), each given its values by `sample(trial)` (the search
    space's suggestions). Returns (the trials, the numbers of those taken up)."""
    import optuna
    from optuna.trial import TrialState

    batch: list = []
    with claims.asking():
        trials = study.get_trials(deepcopy=False)
        for t in trials:
            if len(batch) < n_jobs and t.state == TrialState.RUNNING and claims.take(t.number):
                if study._storage.get_trial(t._trial_id).state != TrialState.RUNNING:  # told as we looked
                    claims.release(t.number)
                    continue
                batch.append(optuna.Trial(study, t._trial_id))
        resumed = [t.number for t in batch]
        total = len(trials)
        while len(batch) < n_jobs and total < n_trials:
            trial = study.ask()
            sample(trial)
            if trial.number >= total:  # a new trial (an enqueued, WAITING one was counted already)
                total += 1
            claims.take(trial.number)
            batch.append(trial)
    return batch, resumed


def wait_for_run(run_dir: Path, poll: float = 2.0) -> bool:
    """Wait while another process trains `run_dir` (a trial of another driver with the same values, or the Slurm job
    of a driver that is gone); True if there was anything to wait for."""
    waited = False
    while lock_held(run_dir):
        if not waited:
            log.info(f"optuna: {run_dir.name} is trained by another process: waiting for it")
            waited = True
        time.sleep(poll)
    return waited


def driver_ordinal(study: Any) -> int:
    """How many drivers have started on this study before this one (kept in the study; call it under ask.lock): the
    sampler's seed is offset by it, so that drivers started together do not draw the same points."""
    ordinal = int(study.user_attrs.get("slm_drivers", 0))
    study.set_user_attr("slm_drivers", ordinal + 1)
    return ordinal


__all__ = ["CLAIMS_DIR", "Claims", "driver_ordinal", "next_batch", "refuse_unshared", "shareable", "wait_for_run"]
