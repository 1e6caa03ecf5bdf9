"""What the slm sweepers share: each job's config and run directory, its outcome, the sweep's progress lines and
summary.

A job's outcome is read from its run directory's result.json (the same file `slm-status` reads), so a
sweeper sees the same thing whichever launcher ran the job, in this process or on a Slurm node. A job
whose result.json cannot be read is not launched (nothing overwrites the file) and is `unreadable`.
Progress lines are read the same way, from every job's run directory (slm.runs.status.sweep_progress), so a copy
of the sweep counts the other copies' jobs too.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Union

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from slm.runs.errors import one_line
from slm.runs.record import FINAL, RecordError, load_record, settled
from slm.durations import duration
from slm.runs.lock import lock_held
from slm.runs.progress import progress_text, sweep_progress
from slm.runs.states import DIVERGED, FAILED, RUNNING, STOPPED, UNREADABLE, states_of
from slm.sweeps.status import WORKERS_DIR_ENV, WORKERS_ENV, summary_lines

log = logging.getLogger(__name__)


@dataclass
class Job:
    overrides: list[str]
    run_dir: Path
    cfg: Union[DictConfig, dict, None]
    """The job's config: Hydra's (a DictConfig), or its resolved mapping less the hydra node where compose.Composer
    applied the overrides to plain values; None when the overrides do not compose. Read it with select and section."""
    error: Optional[str] = None

    @property
    def key(self) -> str:
        return self.run_dir.name

    def select(self, key: str, default: Any = None) -> Any:
        """The resolved value at a dotted key (`train.lr`), `default` when it is not there, as OmegaConf.select."""
        if not isinstance(self.cfg, dict):
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
            return OmegaConf.to_container(self.cfg[name], resolve=True)
        return copy.deepcopy(self.cfg[name])


def _key(overrides: list[str], master: DictConfig) -> str:
    """The job key of raw overrides, as hydra.sweep.subdir makes it (for a job whose config does not compose)."""
    from slm.cli.job_keys import key_from_overrides

    return key_from_overrides(overrides, master.hydra.job.config.override_dirname.exclude_keys,
                              str(master.hydra.sweep.dir))


def compose_job(config_loader: Any, master: DictConfig, overrides: list[str]) -> Job:
    """The job's config and run directory (hydra.sweep.dir / hydra.sweep.subdir), as the launcher will
    make them; a config that does not compose gives cfg None, its error line and the directory its key
    names. Hydra's full composition (a third of a second): the sweepers compose through compose.Composer, which
    takes this path only where its own does not apply."""
    try:
        cfg = config_loader.load_sweep_config(master, list(overrides))
        return Job(list(overrides), Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir), cfg)
    except Exception as err:
        from slm.cli.config import setting_error

        run_dir = Path(str(master.hydra.sweep.dir)) / _key(list(overrides), master)
        return Job(list(overrides), run_dir, None, one_line(setting_error(err) or err))  # a resolver's own line


SWEEP_CONFIGS = "multirun"  # <sweep dir>/multirun/<UTC time>.yaml: every sweep started in this run group


def save_sweep_config(config: DictConfig, sweep_dir: Path) -> Path:
    """Write the sweep's config as multirun.yaml (the latest, as Hydra does) and, kept, as
    multirun/<UTC start time>.yaml, so that a second sweep in the same run group does not erase the first's
    record; both atomically. Returns the kept copy."""
    import os
    import time

    from slm.atomic import atomic_write

    text = OmegaConf.to_yaml(config).encode()
    stamp = time.strftime("%Y-%m-%dT%H-%M-%SZ", time.gmtime())
    kept = sweep_dir / SWEEP_CONFIGS / f"{stamp}.yaml"
    if kept.exists():  # two sweeps started in the same second
        kept = kept.with_name(f"{stamp}-{os.getpid()}.yaml")
    kept.parent.mkdir(parents=True, exist_ok=True)
    for path in (kept, sweep_dir / "multirun.yaml"):
        atomic_write(path, lambda f: f.write(text))
    return kept


LR_OVERRIDES = ("train.lr=", "+train.lr=", "++train.lr=")


def lr_multipliers(values: Any) -> list[float]:
    """hydra.sweeper.lr_search as a sorted list of distinct multipliers that holds 1 ([] when not set);
    HydraException (one line) for anything but positive finite numbers."""
    if values is None:
        return []
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        values = [values]
    out = set()
    for value in values:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        if not ok:
            raise HydraException(f"hydra.sweeper.lr_search={list(values)!r} is invalid: a list of positive multipliers "
                                 "of each point's train.lr, e.g. [0.25,0.5,1,2,4]")
        out.add(float(value))
    return sorted(out | {1.0})


def lr_text(lr: float) -> str:
    """An lr as the override writes it: 6 significant digits, so a job key stays short and stable."""
    return f"{lr:.6g}"


def search_lr(compose: Callable[[list[str]], Job], jobs: list[Job], multipliers: list[float]
              ) -> tuple[list[Job], dict[str, float]]:
    """Every job at train.lr x each multiplier (the job as given for 1: its key and run stay those of the
    sweep without a search), and {job key: multiplier}; `compose`: overrides -> Job (compose.Composer). A job that
    does not compose is kept once, as given."""
    if not multipliers:
        return jobs, {}
    out, searched = [], {}
    for job in jobs:
        if job.cfg is None:
            out.append(job)
            continue
        base = float(job.select("train.lr"))
        for m in multipliers:
            if m == 1.0:
                variant = job
            else:
                overrides = [o for o in job.overrides if not str(o).startswith(LR_OVERRIDES)]
                variant = compose(overrides + [f"train.lr={lr_text(base * m)}"])
            out.append(variant)
            searched[variant.key] = m
    return unique(out), searched


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


def outcome(job: Job, ret: Optional[JobReturn] = None) -> dict:
    """The job's status, error line and val_nll, from its result.json; a job that raised or left no
    record is recorded failed here (with the launcher's error line when there is one); an unreadable
    record is status `unreadable` with its error; one that is not finished is `running` while a process holds
    its lock (slm.runs.status.live_status), else `stopped`."""
    from slm.runs.job import record_failure

    try:
        record = load_record(job.run_dir) or {}
    except RecordError as err:
        return {"key": job.key, "status": UNREADABLE, "error": str(err), "val_nll": None, "run_dir": str(job.run_dir)}
    if record.get("status") not in (*FINAL, "paused") and ret is not None and ret.status == JobStatus.FAILED:
        record = record_failure(job.run_dir, record.get("config") or {"overrides": job.overrides},
                                one_line(ret._return_value))
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


def copies() -> Optional[int]:
    """How many copies of this sweep slm-workers runs at once ($SLM_WORKERS, which it sets), else None."""
    try:
        return max(1, int(os.environ.get(WORKERS_ENV, "")))
    except ValueError:
        return None


def progress_line(name: str, jobs: list[Job], job: Job, event: str, starting: bool = False) -> str:
    """`sweep <name>: job i of n <event>; <the whole sweep's progress>` (slm.runs.status.progress_text), read from
    every job's run directory (result.json, the lock, the end of train_log.jsonl), so that a copy of the sweep counts
    the other copies' jobs too; `starting`: the job is counted running (this process is about to train it)."""
    states = states_of([j.run_dir for j in jobs])
    index = next(i for i, j in enumerate(jobs) if j.run_dir == job.run_dir)
    if starting:
        states[index] = replace(states[index], status=RUNNING)
    return f"sweep {name}: job {index + 1} of {len(jobs)} {event}; {progress_text(sweep_progress(states, copies()))}"


def say_progress(line: str) -> None:
    """A progress line on stdout, plain (no carriage return: the same on a terminal, in a log or through slm-workers)
    and flushed, so that it comes before the job's own output."""
    print(line, flush=True)


def ended(outcome: dict, seconds: float) -> str:
    """What became of a job this process launched, for its progress line."""
    if outcome["status"] == RUNNING:
        return "is trained by another process"
    return f"{outcome['status']} in {duration(seconds)}"


def note_for_workers(name: str, sweep_dir: Path, jobs: list[Job]) -> bool:
    """Under slm-workers (with more than one copy): note this sweep (its name, directory and job keys) in
    $SLM_WORKERS_DIR, for the summary slm-workers prints once every copy has ended. True if noted."""
    folder = os.environ.get(WORKERS_DIR_ENV)
    if not folder or not Path(folder).is_dir():
        return False
    from slm.runs.record import write_json_atomic

    try:
        write_json_atomic(Path(folder) / f"{os.getpid()}-{time.time_ns()}.json",
                          {"name": name, "sweep_dir": str(sweep_dir), "keys": [j.key for j in jobs]})
    except OSError:
        return False
    return True


def launch(launcher: Any, jobs: list[Job], initial_job_idx: int) -> list[Optional[JobReturn]]:
    """Launch jobs; if the launcher itself fails (e.g. submitit: a Slurm job died without a result), log
    it and return None for each, so that outcomes are read from the run directories."""
    try:
        return list(launcher.launch([j.overrides for j in jobs], initial_job_idx=initial_job_idx))
    except Exception as err:
        log.error(f"launcher: {one_line(err)}")
        return [None] * len(jobs)


def summarize(name: str, sweep_dir: Path, outcomes: list[dict]) -> bool:
    """Print one line per sweep and one per job not completed (failed, diverged, unreadable, or still running in
    another process, which a last line points out); True if any job failed."""
    for line in summary_lines(name, sweep_dir, [(o["key"], o["status"], o["error"]) for o in outcomes]):
        print(line)
    elsewhere = sum(o["status"] == RUNNING for o in outcomes)
    if elsewhere:
        print(f"sweep {name}: {elsewhere} job{'s are' if elsewhere != 1 else ' is'} still training in another process: "
              f"this is not the sweep's end (slm-status {sweep_dir})")
    return any(o["status"] == FAILED for o in outcomes)


def _settings_once(lines: list[str], where) -> list[str]:
    """slm.cli.config.settings_once for a sweep file's overrides: its notes on stderr, once per sweep; a setting
    given two values is a HydraException (one line, before any job directory is made)."""
    from slm.cli.config import SettingGivenTwice, settings_once

    try:
        out, notes = settings_once(lines, where)
    except SettingGivenTwice as err:
        raise HydraException(str(err)) from None
    for note in notes:
        if note not in _NOTED:
            _NOTED.add(note)
            say(f"note: {note}")
    return out


_NOTED: set[str] = set()


def upgrade_point(point: list, index: int) -> list[str]:
    """One of hydra.sweeper.points in today's spelling, each setting once (a setting given two values in it is
    refused)."""
    return _settings_once([str(o) for o in point], lambda i: f"hydra.sweeper.points[{index}]")


def upgrade_params(params: dict) -> dict:
    """hydra.sweeper.params with the old spellings of moved settings rewritten (their values are kept); two
    spellings of one setting are one axis when their values agree, else refused."""
    lines = _settings_once([f"{k}={v}" for k, v in params.items()], lambda i: "hydra.sweeper.params")
    return dict(line.split("=", 1) for line in lines)  # as Hydra's basic sweeper writes them: key=value


def with_point(combo: list[str], point: list[str], index: int) -> list[str]:
    """A job's overrides: the crossed ones (command line and hydra.sweeper.params), then the point's. A setting
    in both is kept once when its values agree; with two values the sweep is refused (HydraException, one line),
    since the point's would silently win."""
    return _settings_once(list(combo) + list(point),
                          lambda i: "command line or hydra.sweeper.params" if i < len(combo)
                          else f"hydra.sweeper.points[{index}]")
