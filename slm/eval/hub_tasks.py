"""Tasks whose data must come from the Hugging Face hub, while the hub cannot be reached: one line, in seconds.

Without this, lm-eval indexes its ~15k task files (20 s on two busy cores) and `datasets` then retries
the hub five times per file (about 50 s, ten warnings) before it gives up. The check runs before either:

  * whether the hub is reachable is decided as for training data (slm.data.hub.check_reachable):
    HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set means offline; otherwise a connection to the hub endpoint
    must open within 3 s. Reachable: nothing is checked, lm-eval loads what it loads.
  * unreachable: a task of the offline index (slm/eval/tasks and --include_path; its groups and tags
    followed) needs the hub when its `dataset_path` is neither a local path nor a packaged builder (json,
    csv, parquet, ...) over local files, and it has no `custom_dataset`; any other task (lm-eval's own)
    is taken to need the hub. Such a task is refused, unless offline mode is on and `datasets` may find
    the dataset in its cache (then lm-eval loads it from there, or fails at once without retries); a name
    that no task file of lm-eval's mentions (a raw scan, ~1 s) is an unknown task.
"""

from __future__ import annotations

import os
from pathlib import Path

INSTEAD = ("run where the hub is reachable, or choose offline tasks (slm-eval --tasks offline; lm-eval's CLI "
           "--tasks slm_offline)")
PACKAGED_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow", "pandas", "xml", "sql", "webdataset",
                               "imagefolder", "audiofolder", "videofolder"})


def hub_problem() -> str | None:
    """Why the Hugging Face hub cannot be reached now ("HF_HUB_OFFLINE=1 (offline mode)", "no connection
    to ... within 3 s (...)"), or None when it can (slm.data.hub.check_reachable decides)."""
    from slm.data import hub
    from slm.data.config import SourceConfig
    from slm.data.errors import DataError

    try:
        hub.check_reachable(SourceConfig(kind="hub", dataset="-"), instead="")
    except DataError as err:
        return str(err).split(" cannot be reached: ", 1)[-1].rstrip("; ")
    return None


def offline_mode() -> bool:
    from slm.data.hub import OFFLINE_VARS, _truthy

    return any(_truthy(os.environ.get(var)) for var in OFFLINE_VARS)


def _cache_dirs() -> tuple[Path, Path]:
    """(huggingface_hub's cache, datasets' cache), from the environment as it is now."""
    home = Path(os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "huggingface")
    hub_cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or home / "hub"
    datasets_cache = os.environ.get("HF_DATASETS_CACHE") or home / "datasets"
    return Path(hub_cache).expanduser(), Path(datasets_cache).expanduser()


def cached(dataset: str | None = None) -> bool:
    """Whether `datasets` may find `dataset` (a hub id) in its caches; None: whether any dataset is cached."""
    hub_cache, datasets_cache = _cache_dirs()
    try:
        if dataset is None:
            return any(p.name.startswith("datasets--") for p in hub_cache.glob("datasets--*")) or any(
                p.is_dir() and p.name not in ("downloads",) and not p.name.startswith((".", "_"))
                for p in datasets_cache.iterdir())
        return (hub_cache / f"datasets--{dataset.replace('/', '--')}").is_dir() or \
            (datasets_cache / dataset.replace("/", "___")).is_dir()
    except OSError:  # no cache directory
        return False


def _data_files(kwargs) -> list[str]:
    files = (kwargs or {}).get("data_files") if isinstance(kwargs, dict) else None
    if isinstance(files, str):
        return [files]
    if isinstance(files, dict):
        return [f for v in files.values() for f in ([v] if isinstance(v, str) else v or [])]
    return [f for f in files or [] if isinstance(f, str)]


def hub_dataset(cfg: dict | None) -> str | None:
    """The hub dataset a task config loads (its dataset_path), or None when its data is local or it loads
    none (a Python task: unknown, taken as local)."""
    cfg = cfg or {}
    path = cfg.get("dataset_path")
    if cfg.get("custom_dataset") or not path or not isinstance(path, str):
        return None
    if Path(path).expanduser().exists():
        return None
    if path in PACKAGED_BUILDERS:
        remote = [f for f in _data_files(cfg.get("dataset_kwargs")) if "://" in f]
        return f"{path} files {remote[0]}" if remote else None
    return path


def _leaves(name: str, index: dict, tags: dict, seen: set) -> list[tuple[str, str | None]] | None:
    """[(task, hub dataset or None)] under a name of the offline index (groups and tags followed); None when
    the name, or a task under it, is not in that index."""
    if name in seen:
        return []
    seen.add(name)
    entry = index.get(name)
    if entry is None:
        return None
    kind = entry.kind.name
    if kind == "TAG":
        members = tags.get(name, [])
    elif kind == "GROUP":
        members = []  # names, or inline task configs (a dict with its own data), or overrides of a named task
        for item in (entry.cfg or {}).get("task") or []:
            inline = isinstance(item, dict) and ("dataset_path" in item or "custom_dataset" in item)
            members.append(item.get("task") if isinstance(item, dict) and not inline else item)
    else:
        return [(name, hub_dataset(entry.cfg))]
    out: list[tuple[str, str | None]] = []
    for member in members:
        if isinstance(member, dict):
            out.append((str(member.get("task", name)), hub_dataset(member)))
            continue
        if not isinstance(member, str):
            continue
        found = _leaves(member, index, tags, seen)
        if found is None:
            return None
        out += found
    return out


def unknown_tasks(names: list[str]) -> str:
    """The line for task names nobody knows; a shipped task's former name (slm.eval.RENAMED_TASKS) says its new one."""
    from slm.eval import RENAMED_TASKS

    named = [f"{t} (now {RENAMED_TASKS[t]})" if t in RENAMED_TASKS else t for t in names]
    return (f"unknown task(s) {', '.join(named)} (lm-eval's tasks, slm/eval/tasks and --include_path; "
            "`lm-eval ls tasks` lists lm-eval's)")


def check(tasks: list[str], local) -> None:
    """Raise ValueError (one line) when a task in `tasks` needs the hub and the hub cannot be reached.
    `local`: lm-eval's TaskManager over slm/eval/tasks and the --include_path directories only (no defaults).
    Task files (`*.yaml`) and directories are left to lm-eval. Probes the network only when a task needs it."""
    index = local.task_index
    tags: dict[str, list[str]] = {}
    for key, entry in index.items():
        for tag in entry.tags or ():
            tags.setdefault(tag, []).append(key)
    outside, needs = [], []
    for name in tasks:
        if name.endswith(".yaml") or Path(name).is_dir():
            continue
        leaves = _leaves(name, index, tags, set())
        if leaves is None:
            outside.append(name)
        else:
            needs += [(name, task, dataset) for task, dataset in leaves if dataset is not None]
    if not outside and not needs:
        return
    problem = hub_problem()
    if problem is None:
        return
    offline = offline_mode()
    for name, task, dataset in needs:
        if offline and cached(dataset):
            continue
        where = name if task == name else f"{task} (in {name})"
        raise ValueError(f"task {where} needs its dataset from the Hugging Face hub ({dataset}), which cannot be "
                         f"reached: {problem}{_cache_hint(offline)}; {INSTEAD}")
    if outside and not (offline and cached()):
        unknown = [name for name in outside if name not in _mentioned_by_lm_eval(outside)]
        if unknown:
            raise ValueError(unknown_tasks(unknown))
        what = f"task {outside[0]} is not one of" if len(outside) == 1 else f"tasks {', '.join(outside)} are not among"
        raise ValueError(f"{what} the offline tasks (slm/eval/tasks, --include_path): lm-eval's tasks need their "
                         f"data from the Hugging Face hub, which cannot be reached: {problem}{_cache_hint(offline)}; "
                         f"{INSTEAD}")


def _mentioned_by_lm_eval(names: list[str]) -> set[str]:
    """The names that occur as a word in some task file of lm-eval's (a raw scan, ~1 s: building its index
    takes ~20 s): one that occurs nowhere is no task, group or tag of lm-eval's."""
    import re

    import lm_eval.tasks

    patterns = {name: re.compile(rb"(?<![\w.-])" + re.escape(name.encode()) + rb"(?![\w.-])") for name in names}
    found: set[str] = set()
    for directory, _, files in os.walk(Path(lm_eval.tasks.__file__).parent):
        for file in files:
            if not file.endswith((".yaml", ".yml")):
                continue
            try:
                text = Path(directory, file).read_bytes()
            except OSError:
                continue
            found |= {name for name, pattern in patterns.items() if name not in found and pattern.search(text)}
            if len(found) == len(names):
                return found
    return found


def _cache_hint(offline: bool) -> str:
    return "" if offline else " (a dataset already in the local cache loads with HF_DATASETS_OFFLINE=1)"
