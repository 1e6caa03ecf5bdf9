"""The cleanup of a single run refused before training: its run directory removed, so that `slm-status` does not
list a run that never was.

Hydra makes the run directory before the job starts, and a run may be refused after that: by bad input before
anything is written, or by bad input found once its record said `failed` (data too short for a window...).
slm-train calls discard_refused when its run raised; the directory goes when it holds nothing of a run:
  nothing recorded   no result.json, only what Hydra, the lock and slm-train leave (UNSTARTED) and logs, whatever
                     the error
  refused recorded   this attempt made the directory (`fresh`) and bad input refused the run (not its machine:
                     RunFailed stays recorded), its record `failed` and nothing trained: no checkpoint, no model, no
                     train_log line, only REFUSED and logs (checkpoints/ and logs/ holding no file)
A directory a process holds (its lock) is kept, and so is anything else.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from slm.runs.failures import RunFailed
from slm.runs.keys import FULL_KEY_FILE
from slm.runs.record import RESULT_FILE, load_record
from slm.runs.lock import LOCK_FILE, lock_held

UNSTARTED = {".hydra", LOCK_FILE, FULL_KEY_FILE}
"""What Hydra, the lock and slm-train leave in a run directory before training (besides logs)."""

REFUSED = {".hydra", LOCK_FILE, RESULT_FILE, "config.yaml", "checkpoints", "logs", FULL_KEY_FILE}
"""What a fresh single run refused by bad input after its record was written may hold, besides log files;
checkpoints/ and logs/ only while they hold no file."""


def discard_refused(run_dir: str | os.PathLike, err: BaseException, *, fresh: bool,
                    bad_input: tuple[type[BaseException], ...]) -> bool:
    """Remove the directory of a single run that `err` refused before its first step (the module docstring): one
    with nothing recorded, or, when this attempt made it (`fresh`: it had no result.json before) and `err` is bad
    input (one of `bad_input`, the command's user errors) rather than RunFailed, one recorded `failed` that holds
    nothing trained. Returns whether it was removed."""
    path = Path(run_dir)
    refused = fresh and isinstance(err, bad_input) and not isinstance(err, RunFailed)
    if _nothing_recorded(path) or (refused and _refused_record(path)):
        shutil.rmtree(path, ignore_errors=True)
        return True
    return False


def _nothing_recorded(path: Path) -> bool:
    """A run directory with no record that holds only what is left before training (UNSTARTED, logs), not locked."""
    if not path.is_dir() or (path / RESULT_FILE).exists() or lock_held(path):
        return False
    return all(p.name in UNSTARTED or p.name.endswith(".log") for p in path.iterdir())


def _refused_record(path: Path) -> bool:
    """A run directory recorded `failed` that holds nothing trained (REFUSED, log files), not locked; an unreadable
    record or directory is not one."""
    try:
        if not path.is_dir() or lock_held(path) or (load_record(path) or {}).get("status") != "failed":
            return False
        for entry in path.iterdir():
            if entry.name.endswith(".log") and entry.is_file():
                continue
            if entry.name not in REFUSED:
                return False
            if entry.name in ("checkpoints", "logs") and any(p.is_file() for p in entry.rglob("*")):
                return False
    except Exception:  # noqa: BLE001 - an unreadable record or directory: keep it
        return False
    return True
