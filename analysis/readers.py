"""Every file the analysis reads goes through here: results tables (.parquet, .csv, .json), fit.json, the
per-document .jsonl files of an evaluation, multirun.yaml, a run's train_log.jsonl. Whatever is wrong with one
(unreadable, a directory, empty, not UTF-8, not valid JSON/YAML, not a table, the wrong shape) is one BadFile,
`<path>: <what is wrong>` on one line; the commands (analysis/cli.py) print it as `<prog>: error: ...` with exit 2,
and the collector, which skips a damaged file and carries on, as a warning. result.json and sweep.json are read by
slm.runs.record.read_object (RecordError, the same wording).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from pathlib import Path

TABLE_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json"}
"""Results-table files by suffix (slm-collect -o writes each)."""


class BadFile(ValueError):
    """A file that cannot be used: the message is one line, `<path>: <what is wrong>`."""


def json_type(value) -> str:
    """What a JSON value is, in words: "an object", "an array", "a string", "a number", "a boolean", "null"."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {dict: "an object", list: "an array", str: "a string", type(None): "null"}.get(type(value),
                                                                                       type(value).__name__)


def shown(value, limit: int = 40) -> str:
    """A value as it appears in the file, cut to `limit` characters."""
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_number(value, finite: bool = False) -> bool:
    """A JSON number (not a boolean); with `finite`, not NaN or infinite either."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ok and (not finite or math.isfinite(value))


def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes; BadFile when it cannot be read (missing, a directory, no permission) or is empty."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise BadFile(f"{path}: cannot read it ({err.strerror or type(err).__name__})") from None
    if not data.strip():
        raise BadFile(f"{path}: empty file")
    return data


def read_text(path: str | os.PathLike) -> str:
    """The file as UTF-8 text (read_bytes' checks, and BadFile for bytes that are not UTF-8)."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadFile(f"{path}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})") from None


def _parse_json(path, text: str, what: str = "not valid JSON"):
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise BadFile(f"{path}: {what} ({err})") from None
    except RecursionError:
        raise BadFile(f"{path}: {what} (nested too deeply)") from None


def read_json(path: str | os.PathLike, expect: type = dict):
    """The file's JSON value, which must be an `expect` (dict: an object, list: an array)."""
    data = _parse_json(path, read_text(path))
    if not isinstance(data, expect):
        raise BadFile(f"{path}: not {json_type(expect())} but {json_type(data)}")
    return data


def read_json_lines(path: str | os.PathLike, what: str = "a JSON value") -> list[tuple[int, object]]:
    """(line number, JSON value) of each non-blank line of a .jsonl file; BadFile `<path>: line <n> is not
    <what>: not valid JSON (...)` for a line that does not parse."""
    lines = read_text(path).splitlines()
    return [(number, _parse_json(path, text, f"line {number} is not {what}: not valid JSON"))
            for number, text in enumerate(lines, 1) if text.strip()]


def read_train_log(path: str | os.PathLike) -> tuple[list[int], list[float], int]:
    """(steps, losses, lines skipped) of a run's train_log.jsonl (one JSON object a line: step, loss, lr); a line
    that is not such an object (a line being written at the end, a damaged one) is skipped and counted, not an
    error: the log is read while training may still append to it. BadFile for a file that cannot be read."""
    steps, losses, skipped = [], [], 0
    for text in read_text(path).splitlines():
        if not text.strip():
            continue
        try:
            row = json.loads(text)
            step, loss = int(row["step"]), float(row["loss"])
        except (ValueError, KeyError, TypeError, RecursionError):
            skipped += 1
            continue
        steps.append(step)
        losses.append(loss)
    return steps, losses, skipped


def read_yaml(path: str | os.PathLike):
    """The file's YAML value; BadFile for YAML that does not parse (with its line)."""
    import yaml

    text = read_text(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise BadFile(f"{path}: not valid YAML: {getattr(err, 'problem', None) or type(err).__name__}"
                      + (f" at line {mark.line + 1}" if mark else "")) from None


def read_table(path: str | os.PathLike):
    """A results table written by slm-collect: .parquet, .csv or .json (an array of row objects), by its suffix.
    BadFile for any other suffix and for a file that is not such a table."""
    import pandas as pd

    path = Path(path)
    kind = TABLE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise BadFile(f"{path}: expected a .parquet or .csv results table, or a runs directory")
    if kind == "parquet":
        data = read_bytes(path)
        try:
            return pd.read_parquet(io.BytesIO(data))
        except Exception as err:  # noqa: BLE001 - pyarrow's errors for a damaged file are many kinds
            reason = " ".join(str(err).split()).split(". Either the file")[0] or type(err).__name__
            reason = re.sub(r"^Could not open Parquet input source '[^']*': ", "", reason)
            raise BadFile(f"{path}: not a parquet file ({reason})") from None
    text = read_text(path)
    if kind == "json":
        rows = _parse_json(path, text)
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            what = json_type(rows) if not isinstance(rows, list) else "an array with " + next(
                json_type(row) for row in rows if not isinstance(row, dict))
            raise BadFile(f"{path}: not a results table (an array of row objects) but {what}")
        return pd.read_json(io.StringIO(text), orient="records") if rows else pd.DataFrame()
    try:
        return pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as err:
        raise BadFile(f"{path}: not a CSV table ({' '.join(str(err).split())})") from None
