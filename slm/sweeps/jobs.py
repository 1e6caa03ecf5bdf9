"""A sweep's job and its outcome: its config and run directory, whether it is launched, what became of it.

A job's outcome is read from its run directory's result.json (the same file `slm-status` reads), so a sweep sees the
same thing whichever launcher ran the job, in this process or on a Slurm node. A job whose result.json cannot be read
is not launched (nothing overwrites the file) and is `unreadable`.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from slm.runs.record import FINAL, RecordError, load_record, settled
from slm.runs.lock import lock_held
from slm.runs.states import DIVERGED, FAILED, RUNNING, STOPPED, UNREADABLE


class SweepError(ValueError):
    """A sweep refused before anything is made (a job's config against the sweep's settings): one line."""


@dataclass
class Job:
    overrides: list[str]
    run_dir: Path
    cfg: Any
    """The job's config: Hydra's (an OmegaConf DictConfig), or its resolved mapping less the hydra node where the
    composer applied the overrides to plain values; None when the overrides do not compose. Read it with select and
    section."""
    error: Optional[str] = None

    @property
    def key(self) -> str:
        return self.run_dir.name

    def select(self, key: str, default: Any = None) -> Any:
        """The resolved value at a dotted key (`train.lr`), `default` when it is not there, as OmegaConf.select."""
        if not isinstance(self.cfg, dict):
            from omegaconf import OmegaConf

            return OmegaConf.select(self.cfg, key, default=default)
        node: Any = self.cfg
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return default if node == "???" else copy.deepcopy(node)

    def section(self, name: str) -> Any:
        """A top-level section (`model`, `train`, ...) resolved, as a plain container of the caller's own."""
        if not isinstance(self.cfg, dict):
            from omegaconf import OmegaConf

            return OmegaConf.to_container(self.cfg[name], resolve=True)
        return copy.deepcopy(self.cfg[name])


SWEEP_CONFIGS = "multirun"  # <sweep dir>/multirun/<UTC time>.yaml: every sweep started in this run group


def save_sweep_config(text: bytes, sweep_dir: Path) -> Path:
    """Write the sweep's config (`text`, YAML) as multirun.yaml (the latest, as Hydra does) and, kept, as
    multirun/<UTC start time>.yaml, so that a second sweep in the same run group does not erase the first's
    record; both atomically. Returns the kept copy."""
    import os
    import time

    from slm.atomic import atomic_write

    stamp = time.strftime("%Y-%m-%dT%H-%M-%SZ", time.gmtime())
    kept = sweep_dir / SWEEP_CONFIGS / f"{stamp}.yaml"
    if kept.exists():  # two sweeps started in the same second
        kept = kept.with_name(f"{stamp}-{os.getpid()}.yaml")
    kept.parent.mkdir(parents=True, exist_ok=True)
    for path in (kept, sweep_dir / "multirun.yaml"):
        atomic_write(path, lambda f: f.write(text))
    return kept


def unique(jobs: list[Job]) -> list[Job]:
    """Jobs with distinct run directories (two identical points are one job)."""
    seen, out = set(), []
    for job in jobs:
        if job.run_dir not in seen:
            seen.add(job.run_dir)
            out.append(job)
    return out


def say(message: str) -> None:
    """One line on stderr, as slm-train reports skipped jobs."""
    print(f"slm-train: {message}", file=sys.stderr)


def unreadable(job: Job) -> bool:
    """True (and one line on stderr) if the job's result.json exists but cannot be read: it is skipped."""
    try:
        load_record(job.run_dir)
    except RecordError as err:
        say(f"{err}; job skipped (move the file aside to run it again)")
        return True
    return False


def finished(job: Job) -> bool:
    """True if the job need not be launched: recorded completed, or failed/diverged without rerun_failed, and no decay
    branch of it left to train (train.schedule.decay_branches: slm.runs.branches)."""
    from slm.runs.branches import pending_branches

    rerun = job.cfg is not None and bool(job.select("rerun_failed", False))
    if not settled((load_record(job.run_dir) or {}).get("status"), rerun):
        return False
    return not pending_branches(job.run_dir, job.cfg, rerun_failed=rerun)


def record_invalid(job: Job, rerun: bool) -> None:
    """Record a job whose config does not compose as failed, unless its record is final already (and
    not to be redone: `rerun`, from rerun_failed)."""
    from slm.runs.job import record_failure

    if settled((load_record(job.run_dir) or {}).get("status"), rerun):
        return
    job.run_dir.mkdir(parents=True, exist_ok=True)
    record_failure(job.run_dir, {"overrides": job.overrides}, job.error or "invalid config")


def outcome(job: Job, error: Optional[str] = None) -> dict:
    """The job's status, error line and val_nll, from its result.json; a job that the launcher says failed (`error`:
    its line) or that left no record is recorded failed here; an unreadable record is status `unreadable` with its
    error; one that is not finished is `running` while a process holds its lock (slm.runs.states.live_status), else
    `stopped`."""
    from slm.runs.job import record_failure

    try:
        record = load_record(job.run_dir) or {}
    except RecordError as err:
        return {"key": job.key, "status": UNREADABLE, "error": str(err), "val_nll": None, "run_dir": str(job.run_dir)}
    if record.get("status") not in (*FINAL, "paused") and error is not None:
        record = record_failure(job.run_dir, record.get("config") or {"overrides": job.overrides}, error)
    status, error = record.get("status"), record.get("error")
    if status not in FINAL and lock_held(job.run_dir):
        status = RUNNING  # another process (a copy of this sweep) is training it
    elif status is None:
        status, error = FAILED, "the job left no result.json (see its log)"
    elif status == RUNNING:
        status = STOPPED  # started, and nothing trains it now: the same command resumes it
    return {"key": job.key, "status": status, "error": error,
            "val_nll": (record.get("eval") or {}).get("val_nll"), "run_dir": str(job.run_dir)}


def not_launched(outcomes) -> str:
    """What a restarted sweep says of the jobs it does not launch: their count per state, e.g. "the others: 9
    completed, 1 failed (rerun_failed=true runs failed, diverged and invalid jobs again)"."""
    from collections import Counter

    counts = Counter(o["status"] for o in outcomes)
    said = ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    again = " (rerun_failed=true runs failed, diverged and invalid jobs again)" if {FAILED, DIVERGED} & set(counts) else ""
    return f"the others: {said}{again}"


def taken(job: Job) -> bool:
    """True if a job the sweep meant to launch need not be after all: another process holds its lock (a copy of this
    sweep trains it, slm-workers) or it has been recorded completed (failed or diverged: without rerun_failed) since,
    or its record cannot be read any more (its outcome says so)."""
    if lock_held(job.run_dir):
        return True
    try:
        return finished(job)
    except RecordError:
        return True
