"""Checkpoint files that survive a kill or a full disk.

Lightning's own save writes through a temporary file in $TMPDIR and moves it into place; when the runs
directory is on another filesystem, the move is a copy over the old checkpoint, so a kill during it leaves
the previous good `last.ckpt` truncated. Here a checkpoint is written to a hidden temporary file in its own
directory, flushed and fsynced, then renamed over the old one (and the directory fsynced): the old file is
never touched until the new one is complete. A failed write (a full disk) removes its temporary file and
raises; a kill leaves one behind, which `remove_stale` clears on the next start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

TMP_MARK = ".tmp-"


def temp_path(path: Path) -> Path:
    """The temporary file a save of `path` writes first: hidden, beside it, named by this process."""
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save(obj) to `path` through a temporary file in the same directory, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:  # a full disk, a quota: say which file; the previous checkpoint is untouched
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, f"{err.strerror or err} while saving {path} (the previous one is kept)") from err
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def remove_stale(directory: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that killed saves left in `directory`; the paths removed."""
    directory = Path(directory)
    stale = sorted(directory.glob(f".*{TMP_MARK}*")) if directory.is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO with atomic, fsynced writes (see the module docstring)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        atomic_torch_save(checkpoint, path)
