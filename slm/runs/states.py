"""The state of a job, read from its run directory alone: slm-status, slm-collect's `status` column, the sweepers'
summaries and the report use these words and no others.

A job's state comes from its result.json, its progress from the last line of train_log.jsonl (one line per optimizer
step, so it is current to the step) over `training.max_steps`, and whether a process is training it right now from the
run's lock (slm.runs.lock, held by slm.runs.job while it trains). STATES below is the one vocabulary of job states. The
first four are what result.json records (slm.runs.record.STATUSES); the others are read from the run directory:

  completed | failed | diverged   as recorded (failed and diverged with their error line)
  running                         recorded running (or no record yet) and a process holds the lock
  stopped                         started but no process holds the lock: killed, interrupted, or
                                  preempted and waiting to be requeued; the next attempt resumes it
  pending                         a job of the sweep (sweep.json, multirun.yaml) with no run directory yet
  unreadable                      its result.json cannot be read or is not a record (the error says why)
  paused | pruned                 as recorded by successive halving; a pruned run's note is its rung, its
                                  configuration's score and its rank there (its record's `halving`), or, where an
                                  Optuna search's pruner stopped it, the step, the pruner and val_nll there (`pruner`)

A job's time (job_seconds) is what a sweep's eta is made of (slm.runs.progress).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from slm.runs.health import describe as describe_health
from slm.runs.lock import lock_held
from slm.runs.record import STATUSES, RecordError, load_record

COMPLETED, FAILED, DIVERGED, RUNNING = "completed", "failed", "diverged", "running"  # recorded in result.json
PAUSED, PRUNED = "paused", "pruned"  # recorded too: successive halving's (hydra.sweeper.halving)
STOPPED, PENDING, UNREADABLE = "stopped", "pending", "unreadable"  # read from the run directory
STATES = {  # in the order slm-status lists them: what needs attention first
    FAILED: "recorded failed, with its error line (rerun_failed=true runs a sweep's failed jobs again)",
    UNREADABLE: "its result.json cannot be read or is not a record; the line says why",
    DIVERGED: "recorded diverged: a non-finite training loss (step and value in the error line)",
    RUNNING: "a process holds the run's lock and is training it now",
    STOPPED: "started, but no process trains it: killed, interrupted, or preempted and waiting to be requeued; "
             "the same command resumes it",
    PAUSED: "paused at a rung of successive halving (train.length.pause_at), its checkpoint kept: the sweep goes on "
            "with it or prunes it",
    PENDING: "a job of the sweep that has not started (no run directory yet)",
    PRUNED: "stopped for good by successive halving at a rung (its score and rank in its record's halving section)",
    COMPLETED: "recorded completed",
}
ORDER = tuple(STATES)
FINISHED = (COMPLETED, FAILED, DIVERGED, PRUNED)  # a run that ended: its record says so (slm.runs.record.FINAL)
assert set(STATUSES) <= set(STATES), "every recorded status is a job state"


def live_status(recorded: str | None, run_dir: str | os.PathLike) -> str:
    """The job state of a run directory whose result.json records `recorded` (None: no record yet): a run
    recorded running, or without a record, is `running` while a process holds its lock and `stopped` otherwise (one
    recorded paused: `paused`); a recorded completed, failed, diverged or pruned is that."""
    if recorded in FINISHED:
        return recorded
    if lock_held(run_dir):
        return RUNNING
    return PAUSED if recorded == PAUSED else STOPPED


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
    seconds: float | None = None  # a completed run's time (job_seconds); a paused or pruned one's at its pace to its end
    health: str | None = None  # what its record's health section found (slm.runs.health), None when nothing
    pause_fraction: float | None = None  # a paused run's train.length.pause_at (its record's training.paused)

    def to_dict(self) -> dict:
        return asdict(self)


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


def number(value) -> float | None:
    """A record's number as a float; None for anything else (a bool, a string, null)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_state(run_dir: str | os.PathLike, key: str | None = None) -> JobState:
    """The state of one run directory (its key: the directory's name unless given)."""
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
    state.val_nll = number((record.get("eval") or {}).get("val_nll"))
    state.health = describe_health(record.get("health"))
    if state.status == COMPLETED:
        state.seconds = job_seconds(record)
    elif state.status in (PAUSED, PRUNED):  # trained part way (halving's rungs): its pace, over all its steps
        done, trained = training.get("steps"), job_seconds(record)
        if isinstance(done, int) and done > 0 and trained and isinstance(state.max_steps, int):
            state.seconds = trained * state.max_steps / done
        state.note = _halving_note(record, state.status)
        if state.status == PAUSED:
            state.pause_fraction = number((training.get("paused") or {}).get("fraction"))
    if state.status == STOPPED:
        state.note = interruption(training)
    return state


def interruption(training: dict) -> str | None:
    """What stopped a run, from its record's training.interrupted: "SIGINT at step 8: checkpointed, the same command
    resumes it"; None when the record names no signal (killed outright: SIGKILL leaves nothing)."""
    interrupted = training.get("interrupted") if isinstance(training, dict) else None
    if not isinstance(interrupted, dict):
        return None
    sig = interrupted.get("signal")
    then = "to be requeued" if sig not in ("SIGINT", "SIGTERM") else "the same command resumes it"
    return f"{sig} at step {interrupted.get('step')}: checkpointed, {then}"


def rung_number(entry: dict) -> int:
    """The rung (from 1, as the sweep's console counts them) of a pruned record's `halving` section; an earlier
    version's, without `rungs`, counted from 0."""
    return int(entry["rung"]) if "rungs" in entry else int(entry["rung"]) + 1


def _halving_note(record: dict, status: str) -> str | None:
    """A pruned run's rung, score and rank (its record's `halving`); a paused one's step and validation loss there."""
    if status == PRUNED and isinstance(record.get("pruner"), dict):  # an Optuna trial's pruner (hydra.sweeper.pruner)
        p = record["pruner"]
        value = number(p.get("val_nll"))
        return (f"pruned at step {p.get('step')} by the study's pruner, {p.get('pruner')}"
                + ("" if value is None else f": val_nll {value:.4f} there") + f" (trial {p.get('trial')})")
    if status == PRUNED:
        h = record.get("halving")
        if not isinstance(h, dict) or not isinstance(h.get("rung"), int):
            return None
        of = f" of {h['rungs']}" if h.get("rungs") else ""
        score = "failed" if number(h.get("score")) is None else f"{h['score']:.4f}"
        return (f"pruned at rung {rung_number(h)}{of} (step {h.get('step')}): score {score} (its configuration's mean "
                f"over seeds), rank {h.get('rank')} of {h.get('of')}; {h.get('kept')} went on")
    paused = (record.get("training") or {}).get("paused")
    if isinstance(paused, dict) and number(paused.get("val_nll")) is not None:
        return f"paused at step {paused.get('step')}: val_nll {paused['val_nll']:.4f} there"
    return None


def counts(states: list[JobState]) -> dict[str, int]:
    """{state: how many of these jobs are in it}, in ORDER."""
    out: dict[str, int] = {}
    for s in states:
        out[s.status] = out.get(s.status, 0) + 1
    return {k: out[k] for k in sorted(out, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))}


def job_seconds(record: dict) -> float | None:
    """How long a run took, from its record: its training (`training.wall_seconds`, the last session's, scaled to the
    whole run when that session resumed part-way: x steps / session_steps) plus the rest of its last session
    (`training.session_job_seconds`, from the prepared data to the end of scoring: the final validation, the saved
    weights and the eval suite), where the record has it; None when not recorded."""
    training = record.get("training") or {}
    wall, steps, session, whole = (number(training.get(k))
                                   for k in ("wall_seconds", "steps", "session_steps", "session_job_seconds"))
    if wall is None or not math.isfinite(wall) or wall <= 0:
        return None
    trained = wall * steps / session if steps and session and 0 < session < steps else wall
    rest = whole - wall if whole is not None and math.isfinite(whole) and whole > wall else 0.0
    return trained + rest


def states_of(run_dirs: list[Path]) -> list[JobState]:
    """The state of each run directory, in the order given (one not made yet: pending)."""
    return [run_state(d) if Path(d).is_dir() else JobState(key=Path(d).name, status=PENDING) for d in run_dirs]
