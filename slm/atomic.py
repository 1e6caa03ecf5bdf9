"""Files that are replaced whole or not at all: checkpoints, run records, sweep lists.

A write goes to a hidden temporary file beside the target (same directory, so the rename never crosses a
filesystem), is flushed and fsynced, then renamed over the target, and the directory is fsynced: a kill or
a full disk at any moment leaves either the old file or the new one, never a mix. The temporary file is
created with the usual permissions (0666 less the umask), so a colleague can read a shared runs directory.
A write that fails removes its temporary file; one a kill interrupted is left, and `remove_stale` clears it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Callable

TMP_MARK = ".tmp-"


def temp_path(path: Path) -> Path:
    """The temporary file a write of `path` goes to first: hidden, beside it, named by this process."""
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")


def umask() -> int:
    """This process's umask (read from /proc where it can be, so no other thread sees it changed)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None], *, keep_previous: Path | None = None,
                 verb: str = "writing") -> None:
    """Call `write(f)` on a temporary file and rename it over `path` (see the module docstring).

    keep_previous: before the rename, hard-link the old `path` (if any) to this name, so the last good copy
    survives a later damaged one (a filesystem without hard links keeps none). An OSError (a full disk, a
    quota) is raised again naming the file and saying that the previous one is untouched.
    """

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            write(f)

    atomic_save(path, save, keep_previous=keep_previous, verb=verb)


def atomic_save(path: str | os.PathLike, save: Callable[[Path], None], *, keep_previous: Path | None = None,
                verb: str = "writing") -> None:
    """Like atomic_write, for a writer that takes a file name (`save(tmp)`, e.g. safetensors' save_file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        save(tmp)
        os.chmod(tmp, 0o666 & ~umask())  # some writers create their file 0600 (safetensors does)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if keep_previous is not None and path.exists():
            _link(path, Path(keep_previous))
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, f"{err.strerror or err} while {verb} {path} (the previous one is kept)") from err
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def _link(path: Path, previous: Path) -> None:
    """Point `previous` at the file `path` names now (a hard link, swapped in by rename)."""
    tmp = temp_path(previous)
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:  # no hard links here (some network filesystems): no previous copy is kept
        return
    os.replace(tmp, previous)


def remove_stale(directory: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that interrupted writes left in `directory`; the paths removed."""
    directory = Path(directory)
    stale = sorted(directory.glob(f".*{TMP_MARK}*")) if directory.is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
