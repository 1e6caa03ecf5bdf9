"""Checkpoint files that survive a kill, a full disk or damage (the Lightning plugin that saves through here:
slm.training.checkpoint_io).

Lightning's own save writes through a temporary file in $TMPDIR and moves it into place; when the runs
directory is on another filesystem, the move is a copy over the old checkpoint, so a kill during it leaves
the previous good `last.ckpt` truncated. Here a save goes through slm.atomic (a temporary file beside it,
fsync, rename): the old file is never touched until the new one is complete, and it stays as
`previous.ckpt` (a hard link, no copy), the fallback when `last.ckpt` turns out damaged.

Before a resume, `resume_checkpoint` checks `last.ckpt` (every record's CRC, then a weights-only load: a
truncated, overwritten or foreign file is caught here rather than as a traceback inside Lightning) and
applies the run's `bad_checkpoint` choice: fail (one line saying what to do), previous, or restart.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from slm.atomic import atomic_write

LAST = "last.ckpt"
PREVIOUS = "previous.ckpt"
BAD_CHECKPOINT = ("fail", "previous", "restart")
"""What a resume does when last.ckpt is damaged: fail (say so), previous (resume from previous.ckpt), restart
(train from step 0); the damaged file is kept as last.ckpt.bad either way."""


class ResumeError(ValueError):
    """A checkpoint that cannot be resumed from; the message names the file and what to do."""


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written (a full disk, a quota, a read-only directory): errno is the system's,
    `path` the checkpoint's; the file it would have replaced is untouched."""

    def __init__(self, code: int, reason: str, path: str | os.PathLike):
        super().__init__(code, f"{reason} while saving {path} (the previous one is kept)")
        self.path = Path(path)


def os_error_in(err: BaseException) -> OSError | None:
    """The first OSError in `err`'s chain (itself, its cause, its context), or None."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save(obj) to `path` atomically; when `path` is last.ckpt, the file it replaces is kept as
    previous.ckpt beside it (a kept step-<N>.ckpt written again leaves previous.ckpt alone).

    A failed write raises CheckpointWriteError (torch's zip writer reports a full disk as a RuntimeError of its own,
    the system's error in its context)."""
    path = Path(path)
    keep = path.with_name(PREVIOUS) if path.name == LAST else None
    try:
        atomic_write(path, lambda f: torch.save(obj, f), keep_previous=keep, verb="saving")
    except (OSError, RuntimeError) as err:
        cause = os_error_in(err)
        if cause is None or isinstance(err, CheckpointWriteError):
            raise
        system = os_error_in(cause.__cause__) or os_error_in(cause.__context__) or cause  # the system's own error
        raise CheckpointWriteError(cause.errno or system.errno, system.strerror or str(system), path) from err


def inspect_checkpoint(path: str | os.PathLike) -> tuple[int | None, str | None]:
    """(the checkpoint's global step, None) if `path` can be resumed from, else (None, why not)."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()  # reads every record and checks its CRC; torch.load checks none
    except zipfile.BadZipFile as err:
        return None, f"not a complete checkpoint ({err}: truncated, or not a file torch.save wrote)"
    except OSError as err:
        return None, f"cannot be read ({err.strerror or err})"
    if damaged is not None:
        return None, f"damaged: its record {damaged} fails its CRC check"
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError:
        return None, ("it holds pickled objects that weights-only loading refuses (not a checkpoint slm wrote; "
                      "do not load it with weights_only=False)")
    except Exception as err:  # noqa: BLE001 - any failure to load is the answer
        reason = (str(err).splitlines() or [""])[0][:200]
        return None, f"cannot be loaded ({type(err).__name__}: {reason})"
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("global_step"), int) or "state_dict" not in ckpt:
        return None, "not a Lightning training checkpoint (no global_step and state_dict)"
    return ckpt["global_step"], None


def resume_checkpoint(directory: str | os.PathLike, policy: str = "fail", apply: bool = True) -> Path | None:
    """The checkpoint a run resumes from (None: a fresh start), after checking it.

    A damaged last.ckpt raises ResumeError under policy `fail`; under `previous` the run resumes from
    previous.ckpt (if that one is good), under `restart` from step 0; both keep the damaged file as
    last.ckpt.bad, and say what they did on stdout.
    apply=False (the other ranks of a data-parallel job): the same answer, with no file moved and nothing said;
    a last.ckpt.bad without a last.ckpt is taken as rank 0's doing under `previous`.
    """
    if policy not in BAD_CHECKPOINT:
        raise ResumeError(f"bad_checkpoint={policy!r} is invalid: choose one of: {', '.join(BAD_CHECKPOINT)}")
    directory = Path(directory)
    last, previous = directory / LAST, directory / PREVIOUS
    if not last.exists():
        moved = last.with_name(LAST + ".bad")
        if not apply and policy == "previous" and moved.exists() and previous.exists():
            return previous
        return None
    _, problem = inspect_checkpoint(last)
    if problem is None:
        return last
    prev_step, prev_problem = inspect_checkpoint(previous) if previous.exists() else (None, None)
    restart = "bad_checkpoint=restart to train from step 0"
    if prev_step is None:  # nothing to fall back on: restarting is what is left
        both = (f"both checkpoints are damaged: {last} ({problem}) and {previous} ({prev_problem})" if prev_problem
                else f"{last} cannot be resumed from: {problem}, and there is no {PREVIOUS} to fall back on")
        if policy in ("fail", "previous"):
            asked = "" if policy == "fail" else "; bad_checkpoint=previous cannot resume"
            raise ResumeError(f"{both}{asked}; bad_checkpoint=restart is left: run again with it to train from step 0 "
                              f"(the damaged files are kept as last.ckpt.bad{' and previous.ckpt.old' if prev_problem else ''})")
    elif policy == "fail":
        raise ResumeError(f"{last} cannot be resumed from: {problem}; run again with bad_checkpoint=previous to "
                          f"resume from {PREVIOUS} (step {prev_step}) or {restart} (the damaged file is kept as "
                          "last.ckpt.bad)")
    if not apply:
        return previous if policy == "previous" else None
    os.replace(last, last.with_name(LAST + ".bad"))
    if policy == "previous":
        print(f"slm-train: {last} cannot be resumed from ({problem}); resuming from {PREVIOUS} (step {prev_step}), "
              "as bad_checkpoint=previous asks; the damaged file is kept as last.ckpt.bad")
        return previous
    if previous.exists():
        os.replace(previous, previous.with_name(PREVIOUS + ".old"))  # not to be confused with this restart's
    print(f"slm-train: {last} cannot be resumed from ({problem}); training from step 0, as bad_checkpoint=restart "
          "asks; the damaged file is kept as last.ckpt.bad")
    return None
