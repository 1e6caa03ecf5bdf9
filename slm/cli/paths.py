"""The run-path rule (slm.runs.paths) for the slm-* commands: a run argument that names nothing is one line
naming what was tried and the closest names under $SLM_RUNS, and exit 2."""

from __future__ import annotations

import os
from pathlib import Path

from slm.bad_input import describe, fail
from slm.runs.paths import RUN_MARKERS, RunPathError, find_group, find_path, find_run, is_run, runs_in, runs_root

__all__ = ["RUN_MARKERS", "is_run", "resolve_group", "resolve_path", "resolve_run", "runs_in", "runs_root",
           "write_files"]


def _or_exit(find, prog: str, *args) -> Path:
    """find(*args) from slm.runs.paths, or its RunPathError as one line and exit 2."""
    try:
        return find(*args)
    except RunPathError as err:
        fail(prog, str(err))


def resolve_path(arg: str | os.PathLike, prog: str, what: str = "run or checkpoint directory") -> Path:
    """slm.runs.paths.find_path, or one line and exit 2."""
    return _or_exit(find_path, prog, arg, what)


def resolve_run(arg: str | os.PathLike, prog: str) -> Path:
    """slm.runs.paths.find_run (one run; a run group of exactly one run stands for it), or one line and exit 2."""
    return _or_exit(find_run, prog, arg)


def resolve_group(arg: str | os.PathLike, prog: str) -> Path:
    """slm.runs.paths.find_group, or one line and exit 2."""
    return _or_exit(find_group, prog, arg)


def write_files(prog: str, out: Path, what: str, write, errors: tuple = (OSError,)) -> dict:
    """`write(out)`, a writer of files into the directory `out` that returns its manifest ({"files": {name: {count
    name: number, ...}}}), then one line per file with its counts. One line and exit 2 where `out` is a file or the
    writer raises one of `errors` (`what` names the files in the line: "the probes' files")."""
    if out.exists() and not out.is_dir():
        fail(prog, f"{out} is not a directory: give a directory to write {what} into")
    try:
        manifest = write(out)
    except errors as err:
        fail(prog, describe(err))
    for name, info in manifest["files"].items():
        counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in info.items() if isinstance(v, int))
        print(f"{prog}: wrote {out / name} ({counts})")
    return manifest
