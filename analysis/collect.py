"""result.json files -> one tidy table (pandas), one row per run.

    table = collect(["runs/cpu_default", "runs/extra"])      # walks the directories
    table.to_parquet("results.parquet")
    table = load_results("results.parquet")                   # or a runs directory, or a .csv

run_dir holds each run's directory as an absolute path in memory; a saved table stores it relative to the table
file (save_results), and load_results resolves it against the file's location, so a notebook, a command or a
copy of the folder elsewhere finds the runs (a table written before this stored paths relative to the
working directory of slm-collect: those are still found from there).

Where runs are found: every directory holding a `result.json` is one run (the walk does not descend
into it). A Hydra job folder with no result.json (it has `.hydra/`, `config.yaml`, `checkpoints/` or a
train log) becomes a row with status `stopped` (`running` while a process holds its lock); a job of the
sweep whose folder was never created is a row with status `pending`: the jobs the sweepers listed in
sweep.json, or, for a sweep from before sweep.json, those of a basic-sweeper `multirun.yaml` when the
collector can expand it exactly (simple `key=a,b,c` overrides; anything else is not guessed). Statuses are
slm.runs.states's vocabulary, the same words as slm-status. A result.json that cannot be read or parsed, is no
JSON object, or has a status or section of the wrong type (slm.runs.record.load_record) or a field of the
wrong kind (a string where a number belongs: analysis.schema, and a model field whose kind differs from the
other runs'), and a multirun.yaml that cannot be read (analysis.readers), are each named in one warning line
(logger `analysis.collect`) with the reason, and skipped. A results table file that is not one is a BadFile.

Columns: analysis.schema declares each one (name, role, kind, where the record holds it, what it is; the list
is docs/results_table.md; the metrics come from slm.metrics) and row_from_record writes them; records from before
a field moved or was renamed are read in today's spelling (slm.renames for the model section, analysis.records for
lm-eval task names).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

from analysis.metrics import (  # noqa: F401 (re-exported: these lived here before analysis.metrics)
    average_members, chance_column, higher_is_better, lower_is_better, metric_of, single_task_average, stderr_column,
    task_names)
from analysis.readers import BadFile, read_table, read_yaml, shown
from analysis.records import RENAMED_TASKS  # noqa: F401 (the table's task names, for analysis.paired)
from analysis.records import ABSENT, Record, model_section, relative
from analysis.schema import (ANALYSIS, LEADING_AXES, MODEL, PLACEHOLDERS, SWEEP, block, columns, declared,
                             model_cells)
from slm.metrics import LOSS, METRICS
from slm.renames import MODEL_MOVED, TRAIN_MOVED, model_column
from slm.runs.record import RESULT_FILE, RecordError, load_record
from slm.runs.states import ORDER, PENDING, live_status
from slm.sweeps.store import listed_jobs, sweep_ladder, sweep_lr_multipliers, sweep_sections

log = logging.getLogger(__name__)

ALL_STATUSES = ORDER
"""Run statuses in the table: slm.runs.states's vocabulary, the words slm-status and the sweepers use (a run
recorded running that no process trains is `stopped`; a job folder without a record is `stopped`, or
`running` while its lock is held; a job of the sweep with no folder is `pending`)."""

ALWAYS = (*block("identity"), "train_flops", LOSS, *block("tail"))
"""Columns every table has, empty or not (the report and the plots read them)."""

_SKIP_DIRS = {".hydra", "checkpoints", "model", "logs", "eval", "__pycache__", ".git"}
_JOB_MARKERS = (".hydra", "config.yaml", "checkpoints", "train_log.jsonl", "train.log")


def row_from_record(record: dict, run_dir: str | os.PathLike, root: str | os.PathLike | None = None) -> dict:
    """One table row from a result.json record: every declared column (analysis.schema.columns()) in its order,
    the model section's where its columns are declared, a pattern column once per task or suite."""
    view = Record(record, model_section(record), Path(run_dir), root)
    row = view.row
    model_written, done = False, set()  # done: pattern columns, written with the first of their placeholder
    all_columns = columns()
    for column in all_columns:
        if column.source is MODEL:
            if not model_written:  # the model section's columns, where the first of them is declared
                row.update(model_cells(view.model))
                model_written = True
            continue
        if column.source in (SWEEP, ANALYSIS) or column.name in done:
            continue
        placeholder = next((p for p in PLACEHOLDERS if p in column.name), None)
        if placeholder is None:
            value = column.read(view)
            if value is not ABSENT:
                row[column.name] = value
            continue
        group = [c for c in all_columns if placeholder in c.name]  # e.g. score_, stderr_, ... of each task in turn
        for key in PLACEHOLDERS[placeholder](view):
            for member in group:
                value = member.read(view, key)
                if value is not ABSENT:
                    row[member.name.replace(placeholder, key)] = value
        done.update(c.name for c in group)
    return row


def override_column(key: str) -> str | None:
    """The column of a sweep override's key (model.n_layers -> n_layers, model.moe.top_k and the old spelling
    model.top_k -> moe_top_k, model.attention.n_heads and the old model.n_heads -> n_heads, train.lr -> lr) when it
    is one of LEADING_AXES, else None."""
    section, _, rest = key.partition(".")
    if section == "model":
        group, name = MODEL_MOVED.get(rest, (None, rest))
        if group is None and "." in rest:
            group, _, name = rest.partition(".")
        name = model_column(group, name) if group else rest
    elif section == "train":
        old = next((o for o, (g, f) in TRAIN_MOVED.items() if rest == f"{g}.{f}"), None)
        name = old or rest.split(".")[-1]  # train.schedule.kind -> schedule, train.length.epochs -> epochs
    else:
        return None
    return name if name in LEADING_AXES else None


def _not_started_row(run_dir: Path, root, reason: str, status: str, overrides: dict | None = None) -> dict:
    row = {"run": relative(run_dir, root), "sweep": run_dir.parent.name, "status": status, "error": reason,
           "run_dir": os.path.abspath(run_dir)}
    for key, value in (overrides or {}).items():
        name = override_column(key)
        if name is not None:
            row[name] = _parse_value(value)
        elif key == "model":
            row["family"] = value  # the preset name; its own family label is unknown until it runs
        elif key in ("data", "tokenizer"):
            row[key] = value
    return row


def _parse_value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "null": None}.get(text.lower(), text)


def find_run_dirs(root: str | os.PathLike) -> tuple[list[Path], list[Path], list[Path]]:
    """(run dirs with a result.json, Hydra job folders without one, multirun.yaml files) under root."""
    root = Path(root)
    runs, bare, sweeps = [], [], []
    if (root / RESULT_FILE).exists():
        return [root], [], []
    for current, dirs, files in os.walk(root):
        here = Path(current)
        if RESULT_FILE in files or RESULT_FILE in dirs:  # a directory by that name: reported unreadable
            runs.append(here)
            dirs[:] = []
            continue
        if "multirun.yaml" in files:
            sweeps.append(here / "multirun.yaml")
        is_job = here != root and "multirun.yaml" not in files and \
            any((here / marker).exists() for marker in _JOB_MARKERS)
        if is_job:
            bare.append(here)
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
    return sorted(runs), sorted(bare), sorted(sweeps)


def expected_jobs(multirun_yaml: str | os.PathLike) -> dict[str, dict] | None:
    """{job folder name: overrides} of a sweep: the jobs its sweepers listed in sweep.json beside it, or,
    without one, those of a basic-sweeper multirun.yaml expanded, or None when that cannot be done exactly
    (another sweeper, sweeper params, range()/choice()/glob() or quoted values, a sub-directory pattern
    other than the override_dirname job key)."""
    sweep_dir = Path(multirun_yaml).parent
    try:
        listed = listed_jobs(sweep_dir)
    except RecordError as err:
        log.warning("cannot read %s; jobs it lists that never started are not shown", err)
        return None
    if listed:
        return {key: dict(str(o).split("=", 1) for o in overrides if "=" in str(o)) for key, overrides in listed.items()}
    try:
        from slm.runs.keys import job_key
    except ImportError:
        return None
    try:
        cfg = read_yaml(multirun_yaml)
        if not isinstance(cfg, dict) or not isinstance(cfg.get("hydra"), dict):
            raise BadFile(f"{multirun_yaml}: no hydra: section")
    except BadFile as err:
        log.warning("cannot read %s; jobs it lists that never started are not shown", err)
        return None
    try:
        hydra = cfg["hydra"]
        sweeper = hydra.get("sweeper") or {}
        if not str(sweeper.get("_target_", "")).endswith("BasicSweeper") or sweeper.get("params"):
            return None
        if "slm_job_key:${hydra.job.override_dirname}}" not in str(hydra["sweep"]["subdir"]):
            return None
        dirname_cfg = hydra["job"]["config"]["override_dirname"]
        exclude = set(dirname_cfg.get("exclude_keys") or [])
        kv_sep, item_sep = dirname_cfg.get("kv_sep", "="), dirname_cfg.get("item_sep", ",")
        axes = []
        for item in hydra["overrides"]["task"]:
            key, sep, value = str(item).partition("=")
            if not sep or any(c in value for c in "()[]{}'\"\\") or key.startswith(("~", "+")):
                return None
            axes.append((key, value.split(",")))
    except Exception:  # noqa: BLE001 - any surprise means "cannot tell"
        return None
    jobs = {}
    for combo in itertools.product(*(values for _, values in axes)):
        overrides = dict(zip((key for key, _ in axes), combo))
        dirname = item_sep.join(sorted(f"{k}{kv_sep}{v}" for k, v in overrides.items() if k not in exclude))
        key, former = job_key(dirname), job_key(dirname, former_cut=True)  # a long key as runs made before were cut
        jobs[former if former != key and not (sweep_dir / key).exists() and (sweep_dir / former).is_dir() else key] \
            = overrides
    return jobs


def read_record(path: Path) -> dict | None:
    """The parsed result.json, or None (with one warning line naming the file and the reason) when it
    cannot be read or is not a record."""
    try:
        return load_record(path.parent)
    except RecordError as err:
        log.warning("cannot read %s; skipped", err)
        return None


def _row(record: dict, run_dir: Path, root) -> dict | None:
    """row_from_record, or None (one warning line) for a record whose nested fields have unexpected types."""
    try:
        return row_from_record(record, run_dir, root)
    except BadFile as err:  # a field of the wrong kind, named (analysis.schema.Column.read)
        log.warning("cannot read %s; skipped", err)
        return None
    except (AttributeError, TypeError, ValueError) as err:
        log.warning("cannot read %s: unexpected content (%s: %s); skipped", run_dir / RESULT_FILE,
                    type(err).__name__, " ".join(str(err).split()))
        return None


def _lr_multipliers(sweep_dir: Path) -> tuple[dict[str, float], dict[str, dict]]:
    """({run folder: multiplier of its point's lr} of the sweep's lr searches, {run folder: its ladder rung and lr
    rule}) ({} without; a warning line when sweep.json cannot be read)."""
    try:
        sections = sweep_sections(sweep_dir, ("lr_multipliers", "ladder"))  # sweep.json, read once
        return sweep_lr_multipliers(sweep_dir, sections), sweep_ladder(sweep_dir, sections)
    except RecordError as err:
        log.warning("cannot read %s; the lr search's shared lr is inferred", err)
        return {}, {}


def collect(paths: str | os.PathLike | Iterable[str | os.PathLike],
            progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """One row per run found under `paths` (directories walked, or result.json files). Raises
    FileNotFoundError for a path that does not exist. `progress(done, total)` is called as the records are read
    (slm-collect's progress line on thousands of records)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    rows, not_started, seen = [], [], set()
    multipliers: dict[Path, tuple[dict[str, float], dict[str, dict]]] = {}
    found = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"no such file or directory: {path}")
        root = path.parent if path.is_file() else path
        found.append((root, *(([path.parent], [], []) if path.is_file() else find_run_dirs(path))))
    total, done = sum(len(run_dirs) for _, run_dirs, _, _ in found), 0
    if progress is not None:
        progress(0, total)
    for root, run_dirs, bare, sweeps in found:
        for run_dir in run_dirs:
            done += 1
            if progress is not None:
                progress(done, total)
            key = run_dir.resolve()
            if key in seen:
                continue
            seen.add(key)
            record = read_record(run_dir / RESULT_FILE)
            row = _row(record, run_dir, root) if record is not None else None
            if row is not None:
                if run_dir.parent not in multipliers:
                    multipliers[run_dir.parent] = _lr_multipliers(run_dir.parent)
                lr_of, ladder = multipliers[run_dir.parent]
                job = (record.get("branch") or {}).get("of") or run_dir.name  # a decay branch: its run's job
                row["lr_multiplier"] = lr_of.get(job)
                row["lr_rule"] = (ladder.get(job) or {}).get("lr_rule")
                row["ladder_point"] = (ladder.get(job) or {}).get("config")
                rows.append(row)
        for job_dir in bare:
            if job_dir.resolve() not in seen:
                seen.add(job_dir.resolve())
                not_started.append(_not_started_row(job_dir, root, "job folder without result.json",
                                             live_status(None, job_dir)))
        for multirun in sweeps:
            jobs = expected_jobs(multirun)
            for name, overrides in (jobs or {}).items():
                job_dir = multirun.parent / name
                if job_dir.resolve() not in seen:
                    seen.add(job_dir.resolve())
                    not_started.append(_not_started_row(job_dir, root, "a job of the sweep with no job folder",
                                                        PENDING, overrides))
    return tidy(pd.DataFrame(_kinds_agree(rows) + not_started))


_KINDS = ((bool, "true or false"), ((int, float), "a number"), (str, "a string"))
_KIND_OF_TYPE: dict[type, str] = {}
"""_kind by the cell's type, found once per type (a table holds a few types in a million cells)."""


def _kind(value) -> str | None:
    """What a cell holds: "a number", "a string", "true or false", "other" (None: empty)."""
    if value is None:
        return None
    kind = _KIND_OF_TYPE.get(type(value))
    if kind is None:
        kind = _KIND_OF_TYPE[type(value)] = next((word for types, word in _KINDS if isinstance(value, types)), "other")
    return kind


def _kinds_agree(rows: list[dict]) -> list[dict]:
    """The records' rows whose every cell is of the kind most runs have in that column (ties: a number, true or
    false, a string): a record whose model field holds a string where the other runs have a number (which no
    table column can hold) is skipped with one warning line naming it."""
    order = [word for _, word in _KINDS] + ["other"]
    odd: dict[int, str] = {}
    for column in dict.fromkeys(c for row in rows for c in row):
        counts = Counter(_kind(row.get(column)) for row in rows)
        counts.pop(None, None)
        if len(counts) < 2:
            continue
        usual = min(counts, key=lambda word: (-counts[word], order.index(word)))
        for i, row in enumerate(rows):
            if i not in odd and _kind(row.get(column)) not in (None, usual):
                odd[i] = (f"{column} is {shown(row[column])} where {counts[usual]} other "
                          f"run{'s have' if counts[usual] > 1 else ' has'} {usual}")
    for i, why in odd.items():
        log.warning("cannot read %s: %s; skipped", Path(rows[i]["run_dir"]) / RESULT_FILE, why)
    return [row for i, row in enumerate(rows) if i not in odd]


def tidy(table: pd.DataFrame) -> pd.DataFrame:
    """Columns in a stable order (identity, axes, counts, training, metrics, lm-eval, throughput, the rest),
    numbers as numbers."""
    identity, tail = block("identity"), block("tail")
    if table.empty:
        return pd.DataFrame(columns=[*identity, *LEADING_AXES, *block("counts"), *block("metrics"), *tail])
    for column in ALWAYS:
        if column not in table:
            table[column] = None
    avg_cols, lm_cols = _pattern_columns(table, "<suite>"), _pattern_columns(table, "<task>")
    order = [*identity, *[c for c in LEADING_AXES if c in table], *[c for c in block("counts") if c in table],
             *[c for c in block("metrics") if c in table], *avg_cols, *lm_cols,
             *[c for c in block("throughput") if c in table], *[c for c in block("training") if c in table]]
    rest = [c for c in table.columns if c not in order and c not in tail]
    table = table[order + rest + tail].copy()
    for column in table.columns:
        if table[column].dtype == object:
            values = table[column].dropna()
            if len(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                table[column] = pd.to_numeric(table[column])
            elif len(values) and all(isinstance(v, bool) for v in values):
                table[column] = table[column].astype("boolean")
    table = table.sort_values(["sweep", "run"], na_position="last", kind="stable").reset_index(drop=True)
    return table


def _pattern_columns(table: pd.DataFrame, placeholder: str) -> list[str]:
    """The table's columns of one placeholder's metrics (slm.metrics), each task's (or suite's) together, in the
    registry's order (score, stderr, metric, samples, chance of a task), the tasks sorted by name."""
    prefixes = [m.prefix for m in METRICS.values() if m.placeholder == placeholder]
    score = next(m.prefix for m in METRICS.values() if m.placeholder == placeholder and m.is_score)
    keys = sorted({c[len(score):] for c in table.columns if c.startswith(score)})
    return [f"{p}{key}" for key in keys for p in prefixes if f"{p}{key}" in table]


def load_results(path: str | os.PathLike) -> pd.DataFrame:
    """The results table from a .parquet or .csv file written by `slm-collect`, or collected afresh
    from a runs directory (or a result.json). FileNotFoundError for a path that does not exist; BadFile
    (analysis.readers, one line naming the file) for a file that is not such a table."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    if path.is_dir() or path.name == RESULT_FILE:
        return collect([path])
    table = read_table(path)
    check_numbers(table, path)
    table = tidy(table) if path.suffix.lower() == ".json" else table
    if "run_dir" in table:
        table["run_dir"] = resolve_run_dirs(table["run_dir"], path.parent)
    return table


def resolve_run_dirs(run_dirs: pd.Series, base: str | os.PathLike) -> pd.Series:
    """The run directories of a table read from a file in `base`, as paths that work from anywhere: a relative one
    (save_results writes them relative to the table's folder) resolved against `base`; an absolute one as it is. A
    relative path that names no directory there but does from the working directory (tables written before run
    paths were stored relative to the table) is taken from the working directory."""
    base = Path(os.path.abspath(base))

    def one(value):
        if not isinstance(value, str) or not value or os.path.isabs(value):
            return value
        beside = os.path.normpath(base / value)
        if not os.path.isdir(beside) and os.path.isdir(value):
            return os.path.abspath(value)
        return beside
    return run_dirs.map(one)


def stored_run_dirs(run_dirs: pd.Series, base: str | os.PathLike) -> pd.Series:
    """The run directories as a table file in `base` stores them: relative to `base`, so the table and its runs
    move together and any reader finds them (load_results resolves them back)."""
    base = os.path.abspath(base)

    def one(value):
        if not isinstance(value, str) or not value:
            return value
        try:
            return os.path.relpath(os.path.abspath(value), base)
        except ValueError:  # another drive (Windows): no relative path exists
            return os.path.abspath(value)
    return run_dirs.map(one)


def check_numbers(table: pd.DataFrame, path: str | os.PathLike) -> None:
    """BadFile naming the file, column and run where a table holds text in a column of numbers: one the schema
    declares a number or an integer (val_nll, tokens, score_<task>, ...), or a model field whose other cells
    are numbers (n_layers)."""
    for column in table.columns:
        cells = table[column]
        if pd.api.types.is_numeric_dtype(cells) or pd.api.types.is_bool_dtype(cells):
            continue
        numbers = pd.to_numeric(cells, errors="coerce")
        text = cells.notna() & numbers.isna() & (cells.astype(str).str.strip() != "")
        if not text.any():
            continue
        column_ = declared(str(column))
        kind = column_.kind if column_ is not None else None
        if kind in ("number", "integer") or kind is None and numbers.notna().sum() > text.sum():
            first = text.to_numpy().nonzero()[0][0]
            run = f"run {table['run'].iloc[first]}" if "run" in table else f"row {first + 1}"
            raise BadFile(f"{path}: column {column}: {run} has {shown(cells.iloc[first])}, not a number"
                          + (f" ({text.sum()} such cells)" if text.sum() > 1 else ""))


def save_results(table: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write the table as .parquet (default) or .csv, by the file name; run_dir is stored relative to the file's
    folder (load_results resolves it against the file's location, so any reader, from any working directory,
    finds the runs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if "run_dir" in table:
        table = table.assign(run_dir=stored_run_dirs(table["run_dir"], path.parent))
    if path.suffix.lower() == ".csv":
        table.to_csv(path, index=False)
    elif path.suffix.lower() == ".json":
        table.to_json(path, orient="records", indent=1)
    else:
        table.to_parquet(path, index=False)
    return path
