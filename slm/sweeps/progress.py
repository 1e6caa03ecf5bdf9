"""What a sweep says while it runs and when it ends: `job i of n` progress lines, the note a copy under slm-workers
leaves, the summary.

Progress lines are read from every job's run directory (slm.runs.progress.sweep_progress), so a copy of the sweep counts
the other copies' jobs too.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

from slm.durations import duration
from slm.runs.progress import progress_text, sweep_progress
from slm.runs.states import FAILED, RUNNING, states_of
from slm.sweeps.status import WORKERS_DIR_ENV, WORKERS_ENV, summary_lines
from slm.sweeps.jobs import Job


def copies() -> Optional[int]:
    """How many copies of this sweep slm-workers runs at once ($SLM_WORKERS, which it sets), else None."""
    try:
        return max(1, int(os.environ.get(WORKERS_ENV, "")))
    except ValueError:
        return None


def progress_line(name: str, jobs: list[Job], job: Job, event: str, starting: bool = False) -> str:
    """`sweep <name>: job i of n <event>; <the whole sweep's progress>` (slm.runs.progress.progress_text), read from
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
