"""Where a command's run argument points: one rule for every command that takes a run, a run group or a
results root (slm-generate, slm-eval, slm-export-hf, slm-status here through slm.cli.paths; slm-collect,
slm-report and slm-compare in analysis.cli).

An argument is, in this order: a path that exists (absolute, or from the working directory); else a path under
$SLM_RUNS (default runs/, where slm-train writes): a run group (`cpu_default`) or a run in one
(`cpu_default/model=gpt2,model.n_layers=4`). A command that needs one run also takes a run group that holds
exactly one run (`slm-generate train`). When nothing matches, one line and exit 2 name what was tried and the
closest names under $SLM_RUNS (RunPathError here; the commands turn it into that line).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path


RUN_MARKERS = ("result.json", "model", "config.json")
"""What makes a directory a run (its record, its model/) or a checkpoint directory (config.json)."""


def runs_root() -> Path:
    """Where run groups live: $SLM_RUNS, default `runs` (as conf/config.yaml's hydra.run.dir)."""
    return Path(os.environ.get("SLM_RUNS") or "runs")


def is_run(path: Path) -> bool:
    """A run directory or a checkpoint directory (not a run group)."""
    return any((path / marker).exists() for marker in RUN_MARKERS)


def runs_in(group: Path) -> list[Path]:
    """The runs of a run group: its directories that are runs, by name."""
    try:
        return sorted(p for p in group.iterdir() if p.is_dir() and not p.name.startswith(".") and is_run(p))
    except OSError:
        return []


def _names(root: Path) -> list[str]:
    """The run groups under root and their runs, as paths relative to root (`group`, `group/key`)."""
    if not root.is_dir():
        return []
    groups = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    return [name for g in groups for name in (g.name, *(f"{g.name}/{r.name}" for r in runs_in(g)))]


def _hint(arg: str, root: Path) -> str:
    """What lies under root that the argument may have meant: the closest names, else the run groups."""
    if not root.is_dir():
        return f"{root} does not exist (set SLM_RUNS to where slm-train writes runs)"
    names = _names(root)
    if not names:
        return f"{root} has no run groups yet"
    given = Path(arg).expanduser()
    parts = given.parts
    if parts[:len(root.parts)] == root.parts:  # given with the runs directory in front
        parts = parts[len(root.parts):]
    elif not given.is_absolute() and parts[:1] == (root.name,):  # runs/<group>/... while $SLM_RUNS is elsewhere
        parts = parts[1:]
    wanted = "/".join(parts) or arg
    close = difflib.get_close_matches(wanted, names, n=3, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(str(root / name) for name in close)}?"
    groups = [name for name in names if "/" not in name]
    shown = ", ".join(groups[:8]) + (f", ... ({len(groups)} in all)" if len(groups) > 8 else "")
    return f"run groups under {root}: {shown}"


class RunPathError(ValueError):
    """A run argument that names nothing (the message is the command's one line, without its name)."""


def find_path(arg: str | os.PathLike, what: str = "run or checkpoint directory") -> Path:
    """The path `arg` names: itself if it exists, else $SLM_RUNS/arg if that exists; RunPathError
    (`<arg>: no such <what>, here or under <root>; <hint>`) if neither."""
    path = Path(arg).expanduser()
    if path.exists():
        return path
    root = runs_root()
    if not path.is_absolute() and (root / path).exists():
        return root / path
    raise RunPathError(f"{arg}: no such {what}, here or under {root}; {_hint(str(arg), root)}")


def find_run(arg: str | os.PathLike) -> Path:
    """One run (or checkpoint directory, or a file the loader explains) from `arg` (find_path's rule); a run
    group stands for its run when it holds exactly one, and is a RunPathError otherwise."""
    path = find_path(arg)
    if not path.is_dir() or is_run(path):
        return path
    runs = runs_in(path)
    if len(runs) == 1:
        return runs[0]
    if runs:
        raise RunPathError(f"{path} is a run group of {len(runs)} runs: name one, e.g. {runs[0]} (slm-status {path} "
                           "lists them)")
    raise RunPathError(f"{path}: not a run directory (no result.json or model/) nor a checkpoint directory (no "
                       "config.json), and no run in it")


def find_group(arg: str | os.PathLike, what: str = "run group or directory") -> Path:
    """A run group, run directory or results root from `arg` (find_path's rule); RunPathError unless a
    directory."""
    path = find_path(arg, what=what)
    if not path.is_dir():
        raise RunPathError(f"{path}: not a directory (a run group, e.g. {runs_root() / 'cpu_default'}, or a run "
                           "directory)")
    return path


NAME_MAX = 255
"""The longest file name (in bytes) most filesystems take."""


class RunGroupError(ValueError):
    """A run group that would not name one directory inside the runs directory."""


def check_run_group(value) -> str:
    """`value` as a run-group name: one directory name inside the runs directory ($SLM_RUNS/<run_group>/...).
    RunGroupError (one line naming the value) for the empty name, `.` and `..`, a path (a separator, absolute),
    a hidden name, a NUL, or a name too long for a file name."""
    name = "" if value is None else str(value)
    allowed = "one directory name, e.g. run_group=my_study"
    if value is None or not name.strip():
        problem = "the empty name would write runs into the runs directory itself"
    elif name in (".", ".."):
        problem = "it names a directory outside the run groups"
    elif "/" in name or "\\" in name or os.sep in name or (os.altsep and os.altsep in name):
        problem = "a path, not a name: runs must stay inside the runs directory"
    elif name.startswith("."):
        problem = "a name starting with '.' is hidden from slm-status and slm-collect"
    elif "\0" in name:
        problem = "it holds a NUL character"
    elif len(name.encode()) > NAME_MAX:
        problem = f"{len(name.encode())} bytes long, and a directory name may have at most {NAME_MAX}"
    else:
        return name
    shown = name if len(name) <= 60 else name[:40] + f"... ({len(name)} characters)"
    raise RunGroupError(f"run_group={shown!r} is invalid: {problem}; use {allowed}")


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def directory_problem(path: Path, setting: str, purpose: str) -> str | None:
    """Why files cannot be written under `path` (None if they can, or may: a directory that does not exist yet is
    judged by its nearest existing ancestor): one line naming `setting` (e.g. "SLM_RUNS=/data/runs") and what
    to do. A read-only filesystem is seen (os.access reports EROFS); permission bits are not, for root."""
    try:
        existing = _nearest_existing(Path(path).expanduser())
    except OSError as err:  # ENAMETOOLONG, ELOOP...
        return f"{setting}: {err.strerror or type(err).__name__}; point it at another directory for {purpose}"
    if not existing.is_dir():
        return (f"{setting}: {existing} is {'a file' if existing.is_file() else 'not a directory'}; point it at a "
                f"directory for {purpose}")
    if not os.access(existing, os.W_OK | os.X_OK):
        return (f"{setting}: {existing} is not writable (read-only); point it at a writable directory for {purpose}")
    return None
