"""The cache directory shared by every job of a sweep: where it is, a per-key lock, atomic writes.

Layout: `tokens/<key>.bin` + `tokens/<key>.json` (shards), `vocab/<key>.json` (fitted vocabularies),
`locks/<key>.lock`. A file appears under its final name only once complete (temp file + os.replace), and
a job that builds an entry holds the entry's fcntl lock, so a second job waits for it and then reuses
the result instead of building it again. A killed job leaves at most a temp file, removed by the next one.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

DEFAULT_CACHE = "~/.cache/slm"


def cache_root(configured: str | None = None) -> Path:
    """data.cache_dir, else $SLM_CACHE, else ~/.cache/slm."""
    return Path(configured or os.environ.get("SLM_CACHE") or DEFAULT_CACHE).expanduser()


def entry(root: Path, kind: str, name: str) -> Path:
    """Path of `name` in the cache folder `kind` (created if missing)."""
    folder = root / kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


@contextmanager
def locked(root: Path, key: str, what: str) -> Iterator[None]:
    """Hold the exclusive lock of `key`; say on stderr when another job holds it."""
    fd = os.open(entry(root, "locks", f"{key}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"slm.data: another job is {what}; waiting for it", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def temp_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def remove_stale(path: Path) -> None:
    """Delete temp files of `path` left by killed jobs (call while holding its lock)."""
    for stale in path.parent.glob(f"{path.name}.tmp-*"):
        stale.unlink(missing_ok=True)


def write_json(path: Path, value) -> None:
    tmp = temp_path(path)
    tmp.write_text(json.dumps(value, ensure_ascii=False, indent=1) + "\n")
    os.replace(tmp, path)
