"""Where the runs of a sweep stand, read from their directories alone (`slm-status` prints it).

A job's state comes from its result.json, its progress from the last line of train_log.jsonl (one line
per optimizer step, so it is current to the step) over `training.max_steps`, and whether a process is
training it right now from the run's lock (run_lock below, held by slm.runs.job while it trains).

STATES below is the one vocabulary of job states: slm-status, slm-collect's `status` column, the sweepers'
summaries and the report use these words and no others. The first four are what result.json records
(slm.runs.record.STATUSES); the others are read from the run directory:

  completed | failed | diverged   as recorded (failed and diverged with their error line)
  running                         recorded running (or no record yet) and a process holds the lock
  stopped                         started but no process holds the lock: killed, interrupted, or
                                  preempted and waiting to be requeued; the next attempt resumes it
  pending                         a job of the sweep (sweep.json, multirun.yaml) with no run directory yet
  unreadable                      its result.json cannot be read or is not a record (the error says why)
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from slm.runs.record import RESULT_FILE, STATUSES, RecordError, load_record, read_object

log = logging.getLogger(__name__)
LOCK_FILE = ".lock"  # flock-ed by the process training the run (slm.runs.job)
SWEEP_FILE = "sweep.json"  # written by the sweepers into the sweep directory: every job key and its overrides

# ---------------------------------------------------------------- the vocabulary of job states
COMPLETED, FAILED, DIVERGED, RUNNING = "completed", "failed", "diverged", "running"  # recorded in result.json
STOPPED, PENDING, UNREADABLE = "stopped", "pending", "unreadable"  # read from the run directory
STATES = {  # in the order slm-status lists them: what needs attention first
    FAILED: "recorded failed, with its error line (rerun_failed=true runs a sweep's failed jobs again)",
    UNREADABLE: "its result.json cannot be read or is not a record; the line says why",
    DIVERGED: "recorded diverged: a non-finite training loss (step and value in the error line)",
    RUNNING: "a process holds the run's lock and is training it now",
    STOPPED: "started, but no process trains it: killed, interrupted, or preempted and waiting to be requeued; "
             "the same command resumes it",
    PENDING: "a job of the sweep that has not started (no run directory yet)",
    COMPLETED: "recorded completed",
}
ORDER = tuple(STATES)
FINISHED = (COMPLETED, FAILED, DIVERGED)  # a run that ended: its record says so (slm.runs.record.FINAL)
assert set(STATUSES) <= set(STATES), "every recorded status is a job state"


def live_status(recorded: str | None, run_dir: str | os.PathLike) -> str:
    """The job state of a run directory whose result.json records `recorded` (None: no record yet): a run
    recorded running, or without a record, is `running` while a process holds its lock and `stopped` otherwise;
    a recorded completed, failed or diverged is that."""
    if recorded in FINISHED:
        return recorded
    return RUNNING if lock_held(run_dir) else STOPPED


@dataclass
class JobState:
    key: str
    status: str
    error: str | None = None
    step: int | None = None
    max_steps: int | None = None
    val_nll: float | None = None
    note: str | None = None
    overrides: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@contextmanager
def run_lock(run_dir: Path, attempts: int = 10, name: str = LOCK_FILE):
    """Hold the run's lock (an exclusive flock on run_dir/.lock, or on run_dir/`name`) for the block;
    yields False if another process holds it. Retries `attempts` times over a second, since lock_held
    takes it for an instant to test for a holder."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for _ in range(attempts):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.1)
        else:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def lock_held(run_dir: Path) -> bool:
    """True if a process holds the run's lock (is training it now)."""
    path = Path(run_dir) / LOCK_FILE
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases the shared lock just taken
    return False


def last_step(run_dir: Path) -> int | None:
    """The step of the last line of train_log.jsonl (read from the end of the file), or None."""
    path = Path(run_dir) / "train_log.jsonl"
    if not path.exists():
        return None
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 4096))
        lines = [line for line in f.read().splitlines() if line.strip()]
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a partly written line
    return None


def _overrides(run_dir: Path) -> list[str]:
    """The job's overrides from .hydra/overrides.yaml; [] when there is none or it cannot be read."""
    try:
        overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return []
    return [str(o) for o in overrides] if isinstance(overrides, list) else []


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_state(run_dir: str | os.PathLike, key: str | None = None) -> JobState:
    run_dir = Path(run_dir)
    state = JobState(key=key or run_dir.name, status=PENDING, overrides=_overrides(run_dir))
    try:
        record = load_record(run_dir)
    except RecordError as err:
        state.status, state.error = UNREADABLE, str(err)
        return state
    if record is None:  # started (Hydra made the directory) but no record yet
        state.status = live_status(None, run_dir)
        state.note = "preparing" if state.status == RUNNING else "before training"
        return state
    training = record.get("training") or {}
    state.status, state.error = live_status(record.get("status", RUNNING), run_dir), record.get("error")
    state.max_steps = training.get("max_steps")
    state.step = last_step(run_dir)
    if state.step is None:
        state.step = training.get("steps")
    state.val_nll = _number((record.get("eval") or {}).get("val_nll"))
    if state.status == STOPPED:
        interrupted = training.get("interrupted")
        if isinstance(interrupted, dict):
            sig = interrupted.get("signal")
            then = "to be requeued" if sig not in ("SIGINT", "SIGTERM") else "the same command resumes it"
            state.note = f"{sig} at step {interrupted.get('step')}: checkpointed, {then}"
    return state


def listed_jobs(sweep_dir: str | os.PathLike) -> dict[str, list[str]]:
    """The jobs the sweep's sweep.json lists (key -> overrides), {} without one; RecordError when it
    cannot be read or is not such a listing."""
    path = Path(sweep_dir) / SWEEP_FILE
    if not path.exists():
        return {}
    jobs = read_object(path).get("jobs", {})
    if not isinstance(jobs, dict) or not all(isinstance(o, list) for o in jobs.values()):
        raise RecordError(f"{path}: \"jobs\" is not an object of job key -> overrides")
    return jobs


def sweep_states(sweep_dir: str | os.PathLike, warn: Callable[[str], None] = log.warning) -> list[JobState]:
    """Every job of a sweep directory: its run directories, and the jobs its sweep.json lists (a run
    whose record cannot be read is `unreadable`; an unreadable sweep.json is one `warn` line)."""
    sweep_dir = Path(sweep_dir)
    if (sweep_dir / RESULT_FILE).exists():  # a run directory itself
        return [run_state(sweep_dir)]
    states = {}
    for run_dir in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (run_dir / RESULT_FILE).exists() or (run_dir / ".hydra").exists():
            states[run_dir.name] = run_state(run_dir)
    try:
        listed = listed_jobs(sweep_dir)
    except RecordError as err:
        warn(f"{err}; the jobs not started yet are unknown")
        listed = {}
    for key, overrides in listed.items():
        states.setdefault(key, JobState(key=key, status=PENDING, overrides=overrides))
    return sorted(states.values(), key=lambda s: (ORDER.index(s.status) if s.status in ORDER else len(ORDER), s.key))


def list_jobs(sweep_dir: str | os.PathLike, jobs: dict[str, list[str]],
              warn: Callable[[str], None] = log.warning, lr_multipliers: dict[str, float] | None = None) -> None:
    """Add jobs (key -> overrides) to the sweep's sweep.json, so that slm-status shows those not started
    (an unreadable sweep.json is one `warn` line and replaced), and with `lr_multipliers` (key -> multiplier
    of the point's lr, hydra.sweeper.lr_search) which lr each job of an lr search was trained at."""
    from slm.runs.record import write_json_atomic

    try:
        known = listed_jobs(sweep_dir)
        multipliers = sweep_lr_multipliers(sweep_dir)
    except RecordError as err:
        warn(f"{err}; rewritten with this sweep's jobs")
        known, multipliers = {}, {}
    listing: dict = {"jobs": {**known, **jobs}}
    multipliers.update(lr_multipliers or {})
    if multipliers:
        listing["lr_multipliers"] = multipliers
    write_json_atomic(Path(sweep_dir) / SWEEP_FILE, listing)


def sweep_lr_multipliers(sweep_dir: str | os.PathLike) -> dict[str, float]:
    """{job key: multiplier of its point's lr} of the sweep's lr searches (sweep.json), {} without any;
    RecordError when sweep.json cannot be read."""
    path = Path(sweep_dir) / SWEEP_FILE
    if not path.exists():
        return {}
    found = read_object(path).get("lr_multipliers", {})
    if not isinstance(found, dict):
        raise RecordError(f"{path}: \"lr_multipliers\" is not an object of job key -> multiplier")
    return {str(k): float(v) for k, v in found.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def counts(states: list[JobState]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in states:
        out[s.status] = out.get(s.status, 0) + 1
    return {k: out[k] for k in sorted(out, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))}
