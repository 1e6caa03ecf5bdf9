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

A sweep's progress (sweep_progress, progress_text: the sweepers' lines and slm-status) counts its jobs by state and
estimates the time left from the completed jobs' recorded times (job_seconds), and from a paused or pruned job's pace
over all its steps (successive halving's rungs, where no job completes until the last: an upper bound, "eta at most",
since halving prunes some of what is left); summary_lines is the summary the sweepers and slm-workers print. A
paused or pruned job's note is its rung, its configuration's score and its rank there (its record, sweep.json's
pinned decisions).
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from slm.durations import duration
from slm.runs.health import describe as describe_health
from slm.runs.record import RESULT_FILE, STATUSES, RecordError, load_record, read_object

log = logging.getLogger(__name__)
LOCK_FILE = ".lock"  # flock-ed by the process training the run (slm.runs.job)
SWEEP_FILE = "sweep.json"  # written by the sweepers into the sweep directory: every job key and its overrides

# ---------------------------------------------------------------- the vocabulary of job states
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
    state.health = describe_health(record.get("health"))
    if state.status == COMPLETED:
        state.seconds = job_seconds(record)
    elif state.status in (PAUSED, PRUNED):  # trained part way (halving's rungs): its pace, over all its steps
        done, trained = training.get("steps"), job_seconds(record)
        if isinstance(done, int) and done > 0 and trained and isinstance(state.max_steps, int):
            state.seconds = trained * state.max_steps / done
        state.note = _halving_note(record, state.status)
        if state.status == PAUSED:
            state.pause_fraction = _number((training.get("paused") or {}).get("fraction"))
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
    if status == PRUNED:
        h = record.get("halving")
        if not isinstance(h, dict) or not isinstance(h.get("rung"), int):
            return None
        of = f" of {h['rungs']}" if h.get("rungs") else ""
        score = "failed" if _number(h.get("score")) is None else f"{h['score']:.4f}"
        return (f"pruned at rung {rung_number(h)}{of} (step {h.get('step')}): score {score} (its configuration's mean "
                f"over seeds), rank {h.get('rank')} of {h.get('of')}; {h.get('kept')} went on")
    paused = (record.get("training") or {}).get("paused")
    if isinstance(paused, dict) and _number(paused.get("val_nll")) is not None:
        return f"paused at step {paused.get('step')}: val_nll {paused['val_nll']:.4f} there"
    return None


def _rank_paused(states: list[JobState], decisions: list[dict], records: dict[str, float]) -> None:
    """A paused job's rung, its configuration's score and rank there (sweep.json's pinned decisions), or that its
    rung is not decided yet; `records`: {job key: its pause's fraction}."""
    for state in states:
        if state.status != PAUSED or state.key not in records:
            continue
        fraction = records[state.key]
        for i, d in enumerate(decisions):
            name = next((n for n, keys in (d.get("jobs") or {}).items() if state.key in keys), None)
            if name is not None and isinstance(d.get("fraction"), (int, float)) and math.isclose(d["fraction"], fraction):
                scores = d.get("scores") or {}
                order = sorted(scores, key=lambda n: (math.inf if scores[n] is None else scores[n], n))
                score = "failed" if scores.get(name) is None else f"{scores[name]:.4f}"
                went = "goes on" if name in d.get("kept", []) else "pruned"
                of = f" of {d['rungs']}" if d.get("rungs") else ""
                state.note = (f"rung {i + 1}{of} (step {state.step}): score {score} (its "
                              f"configuration's mean over seeds), rank {order.index(name) + 1} of {len(order)}: {went}")
                break
        else:
            state.note = (f"rung {len(decisions) + 1}" + (f" of {decisions[0]['rungs']}" if decisions and
                                                           decisions[0].get("rungs") else "")
                          + f": {state.note or 'paused'}; ranked once every job of the rung has reached it")


def listed_jobs(sweep_dir: str | os.PathLike) -> dict[str, list[str]]:
    """The jobs the sweep's sweep.json lists (key -> overrides), {} without one; RecordError when it
    cannot be read or is not such a listing."""
    return _section(sweep_dir, "jobs")


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
    paused = {k: s.pause_fraction for k, s in states.items() if s.status == PAUSED and s.pause_fraction}
    if paused:
        _rank_paused(list(states.values()), halving_decisions(sweep_dir), paused)
    return sorted(states.values(), key=lambda s: (ORDER.index(s.status) if s.status in ORDER else len(ORDER), s.key))


SECTIONS = {"jobs": "job key -> overrides", "lr_multipliers": "job key -> multiplier", "ladder": "job key -> rung",
            "carried": "configuration -> carried lr", "halving": "rung index -> its decision"}
"""What a sweep's sweep.json holds: each section an object (what of what)."""


def _section(sweep_dir: str | os.PathLike, name: str, listing: dict | None = None) -> dict:
    """One section of sweep.json ({} without the file or the section); RecordError when the file cannot be read or
    the section is not an object. `listing`: the file's content, read already."""
    path = Path(sweep_dir) / SWEEP_FILE
    if listing is None:
        listing = read_object(path) if path.exists() else {}
    found = listing.get(name, {})
    if not isinstance(found, dict) or (name == "jobs" and not all(isinstance(o, list) for o in found.values())):
        raise RecordError(f"{path}: \"{name}\" is not an object of {SECTIONS[name]}")
    return found


def sweep_sections(sweep_dir: str | os.PathLike, names=tuple(SECTIONS)) -> dict[str, dict]:
    """The sections `names` of the sweep's sweep.json ({} each without the file), read once; RecordError when it
    cannot be read or one of them is not what it should be."""
    path = Path(sweep_dir) / SWEEP_FILE
    listing = read_object(path) if path.exists() else {}
    return {name: _section(sweep_dir, name, listing) for name in names}


def update_sweep_file(sweep_dir: str | os.PathLike, warn: Callable[[str], None] = log.warning, **sections: dict) -> None:
    """Merge `sections` ({section: {key: value}}) into the sweep's sweep.json, read once; the other sections are kept,
    and an unreadable file is one `warn` line and rewritten with what is given."""
    from slm.runs.record import write_json_atomic

    try:
        old = sweep_sections(sweep_dir)
    except RecordError as err:
        warn(f"{err}; rewritten with this sweep's jobs")
        old = {}
    merged = {name: {**old.get(name, {}), **(sections.get(name) or {})} for name in SECTIONS}
    write_json_atomic(Path(sweep_dir) / SWEEP_FILE, {"jobs": merged["jobs"], **{k: v for k, v in merged.items() if k != "jobs" and v}})


def list_jobs(sweep_dir: str | os.PathLike, jobs: dict[str, list[str]],
              warn: Callable[[str], None] = log.warning, lr_multipliers: dict[str, float] | None = None,
              ladder: dict[str, dict] | None = None) -> None:
    """Add jobs (key -> overrides) to the sweep's sweep.json, so that slm-status shows those not started
    (an unreadable sweep.json is one `warn` line and replaced), with `lr_multipliers` (key -> multiplier
    of the point's lr, hydra.sweeper.lr_search) which lr each job of an lr search was trained at, and with `ladder`
    (key -> {rung, rung_index, lr_rule, config, lr_from}: hydra.sweeper.ladder) each ladder job's rung and lr rule."""
    update_sweep_file(sweep_dir, warn, jobs=jobs, lr_multipliers=lr_multipliers, ladder=ladder)


def sweep_lr_multipliers(sweep_dir: str | os.PathLike, sections: dict | None = None) -> dict[str, float]:
    """{job key: multiplier of its point's lr} of the sweep's lr searches (sweep.json, or its `sections` read
    already), {} without any; RecordError when sweep.json cannot be read."""
    found = _section(sweep_dir, "lr_multipliers") if sections is None else sections["lr_multipliers"]
    return {str(k): float(v) for k, v in found.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def sweep_ladder(sweep_dir: str | os.PathLike, sections: dict | None = None) -> dict[str, dict]:
    """{job key: {rung, rung_index, lr_rule, config, lr_from}} of a ladder sweep (sweep.json, or its `sections` read
    already), {} without one; RecordError when sweep.json cannot be read."""
    found = _section(sweep_dir, "ladder") if sections is None else sections["ladder"]
    return {str(k): v for k, v in found.items() if isinstance(v, dict)}


def carried_lrs(sweep_dir: str | os.PathLike) -> dict[str, dict]:
    """{configuration: the lr multiplier a transfer ladder carried up for it, and from where} (sweep.json's
    `carried`), {} without; a sweep.json that cannot be read counts as none (it is rewritten)."""
    try:
        return {str(k): v for k, v in _section(sweep_dir, "carried").items() if isinstance(v, dict)}
    except RecordError:
        return {}


def save_carried_lrs(sweep_dir: str | os.PathLike, carried: dict[str, dict]) -> None:
    """Write a transfer ladder's carried lrs into sweep.json (`carried`), the rest of the file kept."""
    if carried:
        update_sweep_file(sweep_dir, carried=carried)


def halving_decisions(sweep_dir: str | os.PathLike) -> list[dict]:
    """A halving sweep's pinned decisions, rung by rung from the first (sweep.json's `halving`: {rung index: {rung,
    fraction, scores, kept}}), [] without; a sweep.json that cannot be read counts as none (it is rewritten)."""
    try:
        found = _section(sweep_dir, "halving")
    except RecordError:
        return []
    out = []
    while isinstance(found.get(str(len(out))), dict):
        out.append(found[str(len(out))])
    return out


def save_halving_decisions(sweep_dir: str | os.PathLike, decisions: list[dict]) -> None:
    """Pin a halving sweep's decisions in sweep.json (`halving`), the rest of the file kept."""
    update_sweep_file(sweep_dir, halving={str(i): d for i, d in enumerate(decisions)})


def counts(states: list[JobState]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in states:
        out[s.status] = out.get(s.status, 0) + 1
    return {k: out[k] for k in sorted(out, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))}


# ---------------------------------------------------------------- a sweep's progress and summary
def job_seconds(record: dict) -> float | None:
    """How long a run took, from its record: its training (`training.wall_seconds`, the last session's, scaled to the
    whole run when that session resumed part-way: x steps / session_steps) plus the rest of its last session
    (`training.session_job_seconds`, from the prepared data to the end of scoring: the final validation, the saved
    weights and the eval suite), where the record has it; None when not recorded."""
    training = record.get("training") or {}
    wall, steps, session, whole = (_number(training.get(k))
                                   for k in ("wall_seconds", "steps", "session_steps", "session_job_seconds"))
    if wall is None or not math.isfinite(wall) or wall <= 0:
        return None
    trained = wall * steps / session if steps and session and 0 < session < steps else wall
    rest = whole - wall if whole is not None and math.isfinite(whole) and whole > wall else 0.0
    return trained + rest


def states_of(run_dirs: list[Path]) -> list[JobState]:
    """The state of each run directory, in the order given (one not made yet: pending)."""
    return [run_state(d) if Path(d).is_dir() else JobState(key=Path(d).name, status=PENDING) for d in run_dirs]


WORKERS_ENV = "SLM_WORKERS"  # set by slm-workers for its copies: how many copies share the sweep
WORKERS_DIR_ENV = "SLM_WORKERS_DIR"  # set by slm-workers (2 copies or more): where each copy's sweep notes itself
TO_DO = (RUNNING, STOPPED, PAUSED, PENDING)  # a job that still has training to do
SHOWN = (COMPLETED, PRUNED, FAILED, DIVERGED, UNREADABLE, RUNNING, STOPPED, PAUSED, PENDING)  # progress lines' order
ALWAYS_SHOWN = (COMPLETED, FAILED, RUNNING, PENDING)  # shown when zero too


@dataclass
class Progress:
    """Where a sweep's jobs stand, and the time left estimated from its completed jobs' recorded times."""
    total: int
    counts: dict[str, int]
    left: float  # jobs' worth of training left: pending and stopped jobs, running ones less the steps they have done
    per_job: float | None  # mean seconds of a whole job: the `timed` completed jobs that record them (job_seconds),
    # and paused or pruned ones (halving's rungs) at their pace over all their steps
    timed: int
    at_once: int  # jobs training at once

    @property
    def done(self) -> int:
        return sum(self.counts.get(s, 0) for s in FINISHED)

    @property
    def unfinished(self) -> int:
        return sum(self.counts.get(s, 0) for s in TO_DO)

    @property
    def eta(self) -> float | None:
        """Seconds until every job is done: left x per_job / at_once; None without a completed job to time."""
        if not self.unfinished or self.per_job is None:
            return None
        return self.left * self.per_job / self.at_once


def _fraction_done(state: JobState) -> float:
    if state.status == PENDING or not state.max_steps or not isinstance(state.step, int):
        return 0.0
    return min(max(state.step / state.max_steps, 0.0), 1.0)


def sweep_progress(states: list[JobState], copies: int | None = None) -> Progress:
    """The progress of these jobs; `copies`: how many processes share the sweep (slm-workers), else the jobs
    running now (at least 1) are taken as the jobs that train at once."""
    tally = {s: 0 for s in ALWAYS_SHOWN}
    for s in states:
        tally[s.status] = tally.get(s.status, 0) + 1
    times = [s.seconds for s in states if s.status in (COMPLETED, PAUSED, PRUNED) and s.seconds is not None]
    unfinished = [s for s in states if s.status in TO_DO]
    at_once = max(copies or 1, tally[RUNNING], 1)
    return Progress(total=len(states), counts=tally, left=sum(1.0 - _fraction_done(s) for s in unfinished),
                    per_job=sum(times) / len(times) if times else None, timed=len(times),
                    at_once=max(1, min(at_once, len(unfinished))))


def progress_text(p: Progress, why: bool = False) -> str:
    """`2 completed, 0 failed, 1 running, 1 pending (2 of 4 done); eta 4m10s`; `why`: with what the eta is made of."""
    shown = [s for s in SHOWN if s in ALWAYS_SHOWN or p.counts.get(s)]
    shown += [s for s in p.counts if s not in SHOWN and p.counts[s]]
    text = ", ".join(f"{p.counts.get(s, 0)} {s}" for s in shown) + f" ({p.done} of {p.total} done)"
    if not p.unfinished:
        return text
    if p.per_job is None:
        return text + ("; eta unknown: no completed job records its training time (training.wall_seconds)"
                       if p.counts.get(COMPLETED) else "; eta after the first job completes")
    text += f"; eta {'at most ' if p.counts.get(PAUSED) else ''}{duration(p.eta)}"  # halving prunes some of it
    if why:
        parted = p.counts.get(PAUSED, 0) + p.counts.get(PRUNED, 0)
        text += (f": {p.left:.3g} jobs left x {duration(p.per_job)} per job (the mean time of {p.timed} "
                 + ("completed " if not parted else "") + f"job{'s' if p.timed != 1 else ''}: training, and where "
                 "recorded the final validation and scoring"
                 + ("; a paused or pruned one's pace over all its steps" if parted else "")
                 + f"; data preparation not counted), {p.at_once} at a time"
                 + ("; at most: successive halving prunes some of what is left" if p.counts.get(PAUSED) else "")
                 + ("; nothing is running now" if not p.counts.get(RUNNING) else ""))
    return text


def summary_lines(name: str, sweep_dir: str | os.PathLike, jobs: list[tuple[str, str, str | None]]) -> list[str]:
    """A sweep's summary: one line with its jobs' tally, then one per job (key, status, error line) not completed, then
    one per run whose training health was flagged (health_lines)."""
    tally: dict[str, int] = {}
    for _, status, _ in jobs:
        tally[status] = tally.get(status, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in tally.items())
    lines = [f"sweep {name}: {len(jobs)} job{'' if len(jobs) == 1 else 's'}: {parts} (details: slm-status {sweep_dir})"]
    lines += [f"  {status:9s} {key}: {error or ''}".rstrip() for key, status, error in jobs if status != COMPLETED]
    lines += health_lines(sweep_dir, [key for key, status, _ in jobs if status in (COMPLETED, DIVERGED, PAUSED, PRUNED)])
    winner = halving_winner(name, sweep_dir)
    return lines + ([winner] if winner else [])


def halving_winner(name: str, sweep_dir: str | os.PathLike) -> str | None:
    """A halving sweep's answer once its last rung has ended: the configuration with the lowest final validation loss
    (the mean over its seeds) among those trained to the end, its score, and what was pruned (sweep.json's decisions,
    the survivors' records); None before, or without decisions that list their jobs."""
    decisions = halving_decisions(sweep_dir)
    if not decisions or not isinstance(decisions[-1].get("jobs"), dict):
        return None
    last, finals, seeds = decisions[-1], {}, {}
    for config in last["kept"]:
        values = []
        for key in last["jobs"].get(config, []):
            try:
                record = load_record(Path(sweep_dir) / key) or {}
            except RecordError:
                return None
            if record.get("status") not in (COMPLETED, FAILED, DIVERGED):
                return None  # not trained to the end yet
            value = _number((record.get("eval") or {}).get("val_nll"))
            ok = record.get("status") == COMPLETED and value is not None and math.isfinite(value)
            values.append(value if ok else math.inf)
        if values:
            finals[config], seeds[config] = sum(values) / len(values), len(values)
    order = sorted(finals, key=lambda c: (finals[c], c))
    if not order or not math.isfinite(finals[order[0]]):
        return None
    label = (last.get("labels") or {}).get
    best, total = order[0], len(decisions[0].get("scores") or {})
    others = "; ".join(f"{label(c, c)} {finals[c]:.4f}" for c in order[1:4])
    pruned = ", ".join(f"rung {i + 1}: {len(d.get('scores') or {}) - len(d.get('kept') or [])}"
                       for i, d in enumerate(decisions))
    return (f"sweep {name}: halving chose {label(best, best)}: final validation loss {finals[best]:.4f} (the mean of "
            f"{seeds[best]} seed{'s' if seeds[best] != 1 else ''}), "
            + ("the only one trained to the end" if len(finals) == 1 else
               f"the best of the {len(finals)} trained to the end (then {others})")
            + f"; {total - len(finals)} of {total} configurations pruned ({pruned})")


def health_lines(sweep_dir: str | os.PathLike, keys: list[str]) -> list[str]:
    """`  health    <key>: <what went wrong>` for each of these runs whose record's health section flags it
    (slm.runs.health); a record that cannot be read is left out (the summary's own lines name it)."""
    lines = []
    for key in keys:
        try:
            found = describe_health((load_record(Path(sweep_dir) / key) or {}).get("health"))
        except RecordError:
            continue
        if found:
            lines.append(f"  {'health':9s} {key}: {found}")
    return lines
