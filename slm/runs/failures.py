"""A run stopped by its machine rather than by its config or a bug: a full disk or quota, or memory that ran out.

machine_problem gives such a failure its one line (what ran out, what to do, where the same command resumes); the
job records it `failed` with that line and raises RunFailed, so that slm-train keeps the record (slm.runs.refused).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import torch

from slm.runs.layout import CHECKPOINT
from slm.training.checkpoints import os_error_in


class RunFailed(ValueError):
    """A run stopped by its machine (a full disk, no memory left): recorded `failed` with this one line, which says
    what ran out and what to do; the checkpoint before it is intact."""


OUT_OF_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
OUT_OF_MEMORY = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory",
                 "bad_alloc")
"""Fragments of the allocators' messages (PyTorch's CPU and CUDA allocators, the C++ runtime) for an allocation that
failed."""


def _out_of_memory(err: BaseException) -> bool:
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, (MemoryError, torch.OutOfMemoryError)) or (
                isinstance(err, RuntimeError) and any(text in str(err).lower() for text in OUT_OF_MEMORY)):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def _resume_point(run_dir: Path) -> str:
    """Where running the same command again starts: 'resumes from checkpoints/last.ckpt (step N), which is intact',
    or 'starts again from step 0 (...)'."""
    path = run_dir / CHECKPOINT
    if not path.is_file():
        return "starts again from step 0 (no checkpoint was written yet)"
    try:  # the pickle only: the tensors stay memory-mapped, unread
        step = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("global_step")
    except Exception:  # noqa: BLE001 - the resume checks it properly
        return f"resumes from {CHECKPOINT}"
    return f"resumes from {CHECKPOINT} (step {step}), which is intact"


def machine_problem(err: BaseException, run_dir: Path, train_cfg) -> str | None:
    """One line for a run stopped by its machine rather than by its config or a bug (None otherwise): a full disk
    or quota (naming the file and the free space) or an allocation that failed, with what to do."""
    system = os_error_in(err)
    if system is not None and system.errno in OUT_OF_SPACE:
        name = getattr(system, "path", None) or system.filename  # a checkpoint's, or the file a write named
        where = Path(name) if isinstance(name, (str, os.PathLike)) else None
        if where is not None and where.is_relative_to(run_dir):
            where = where.relative_to(run_dir)
        try:
            free = f"; {shutil.disk_usage(run_dir).free / 2**20:,.1f} MiB free there"
        except OSError:
            free = ""
        what = {errno.EDQUOT: "disk quota exceeded", errno.EFBIG: "file too large"}.get(system.errno,
                                                                                        "no space left on device")
        return (f"{what} writing {where or 'the run directory'} in {run_dir}{free}: free space on that disk (or "
                f"move $SLM_RUNS to one with room) and run the same command again (a sweep: with rerun_failed=true); "
                f"it {_resume_point(run_dir)}")
    if _out_of_memory(err):
        reason = " ".join(str(err).split())[:160] or type(err).__name__
        micro = train_cfg.micro_batch()
        smaller = (f"set train.parallel.micro_batch_size below {micro} (gradients accumulated over smaller micro-batches) or "
                   "make the model smaller" if micro > 1 else "make the model or model.context_length smaller")
        return (f"out of memory ({type(err).__name__}: {reason}) with {micro} sequence{'s' if micro != 1 else ''} per "
                f"forward: {smaller} (a new run), or free memory and run the same command again (a sweep: with "
                f"rerun_failed=true): it {_resume_point(run_dir)}")
    return None
