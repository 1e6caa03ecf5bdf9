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

Nothing in a checkpoint names the run directory (slm.training.callbacks.RunCheckpoint), so a run directory copied or
moved elsewhere resumes and keeps checkpointing into its own last.ckpt.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch
from slm.atomic import atomic_write

LAST = "last.ckpt"
PREVIOUS = "previous.ckpt"
LEFTOVER = re.compile(r"last-v(\d+)\.ckpt")
"""A last.ckpt Lightning wrote beside another under a new name (see _leftovers)."""
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


def checkpoint_step(path: str | os.PathLike) -> int:
    """The global step of a checkpoint `inspect_checkpoint` passed (the pickle only: the tensors stay unread)."""
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"]


def _leftovers(directory: Path) -> list[tuple[Path, int | None, str | None]]:
    """The last-v<N>.ckpt files in `directory`, by version, each with its step (or None and what is wrong with it).
    Lightning's ModelCheckpoint wrote them, beside a last.ckpt it no longer recognised, when a run trained before
    slm.training.callbacks.RunCheckpoint was resumed after its directory had been copied or moved."""
    if not directory.is_dir():
        return []
    found = sorted((int(match.group(1)), path) for path in directory.iterdir()
                   if (match := LEFTOVER.fullmatch(path.name)) is not None)
    return [(path, *inspect_checkpoint(path)) for _, path in found]


def _newer_leftover(last: Path, leftovers: list, apply: bool) -> Path | None:
    """The newest good leftover (`_leftovers`) when it is newer than last.ckpt (or last.ckpt is missing or damaged),
    else None. Either way one line says which file is used and which are ignored (apply=False: nothing said, no file
    moved); a damaged last.ckpt passed over is kept as last.ckpt.bad, so no later save keeps it as previous.ckpt."""
    last_step, last_problem = inspect_checkpoint(last) if last.exists() else (None, "there is none")
    good = [(step, version, path) for version, (path, step, problem) in enumerate(leftovers) if problem is None]
    step, _, newest = max(good) if good else (None, None, None)
    use = newest is not None and (last_step is None or step > last_step)
    if not apply:
        return newest if use else None
    where = last.parent.name
    others = [f"{path.name} ({f'step {found}' if problem is None else 'damaged'})"
              for path, found, problem in leftovers if path != newest or not use]
    them = "it" if len(others) == 1 else "them"
    if use:
        if last.exists() and last_problem is not None:
            os.replace(last, last.with_name(LAST + ".bad"))
        was = f"step {last_step}" if last_step is not None else last_problem
        left = (f"; also left there: {', '.join(others)}, older or damaged: delete {them} to free space"
                if others else "")
        print(f"slm-train: resuming from {where}/{newest.name} (step {step}), newer than {where}/{LAST} ({was}): "
              f"Lightning wrote it there after the run directory was copied or moved; the run checkpoints into "
              f"{LAST} from now on, and {newest.name} can be deleted once it has{left}", flush=True)
        return newest
    why = f"none is newer than {LAST} (step {last_step})" if last_step is not None else "none can be resumed from"
    print(f"slm-train: ignoring {', '.join(others)} in {where}/, left by a resume after the run directory was copied "
          f"or moved: {why}; delete {them} to free space", flush=True)
    return None


def resume_checkpoint(directory: str | os.PathLike, policy: str = "fail", apply: bool = True) -> Path | None:
    """The checkpoint a run resumes from (None: a fresh start), after checking it.

    A damaged last.ckpt raises ResumeError under policy `fail`; under `previous` the run resumes from
    previous.ckpt (if that one is good), under `restart` from step 0; both keep the damaged file as
    last.ckpt.bad, and say what they did on stdout.
    A good last-v<N>.ckpt newer than last.ckpt (left by a resume of a moved run directory before the fix, see
    _leftovers) is resumed from, and said so; older or damaged ones are ignored with a note, never used silently.
    apply=False (the other ranks of a data-parallel job): the same answer, with no file moved and nothing said;
    a last.ckpt.bad without a last.ckpt is taken as rank 0's doing under `previous`.
    """
    if policy not in BAD_CHECKPOINT:
        raise ResumeError(f"bad_checkpoint={policy!r} is invalid: choose one of: {', '.join(BAD_CHECKPOINT)}")
    directory = Path(directory)
    last, previous = directory / LAST, directory / PREVIOUS
    leftovers = _leftovers(directory)
    if leftovers:
        newer = _newer_leftover(last, leftovers, apply)
        if newer is not None:
            return newer
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
