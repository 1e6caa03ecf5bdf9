"""The run lock: an exclusive flock on <run dir>/.lock, held by the process training the run (slm.runs.job) for as
long as it trains it, so that no two processes train one run and a run's state can tell `running` (held) from
`stopped` (slm.runs.states)."""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".lock"  # flock-ed by the process training the run (slm.runs.job)


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
