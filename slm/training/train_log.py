"""train_log.jsonl across a resume: one JSON line per optimizer step (step, loss, lr), steps 1..N in order, the values
of an uninterrupted run.

A resume from the checkpoint of step S keeps the lines of steps up to S and drops the later ones, which training
writes again. A damaged line (cut short by a kill, not UTF-8, not JSON, no step) is named by its line number:
  - past the checkpoint's lines (the line before it holds step S or later), it is dropped with the lines after step
    S: its step comes again (a kill during a write leaves the last line cut short: the common case);
  - between two consecutive steps, it holds no step of its own and is dropped;
  - otherwise it held a step the checkpoint is past, whose values cannot be computed again: `kept_lines` raises
    TrainLogError, and the run is refused before anything is written (slm.runs.job).
Standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

NAME = "train_log.jsonl"


class TrainLogError(ValueError):
    """A train_log.jsonl that a resume cannot keep exact; the message names the file, the line and what to do."""


def step_of(raw: bytes) -> tuple[int | None, str | None]:
    """(the step, None) of a complete train_log line, else (None, what is wrong with it)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 at byte {err.start + 1}"
    if not text.strip():
        return None, "blank"
    try:
        row = json.loads(text)
    except ValueError:
        return None, "not JSON"
    step = row.get("step") if isinstance(row, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 1 or "loss" not in row:
        return None, "not a step's row (no integer step and loss)"
    return step, None


@dataclass
class Kept:
    """What a resume keeps of the log: its lines (without newlines) and a one-line note on the damaged lines it dropped
    (None when there were none)."""

    lines: list[str]
    note: str | None


def kept_lines(path: str | os.PathLike, step: int) -> Kept:
    """The lines of `path` a resume from the checkpoint of `step` keeps (those of steps up to `step`), reading only; a
    damaged line is dropped with a note, or raises TrainLogError when it held one of those steps (module docstring)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Kept([], None)
    except OSError as err:
        raise TrainLogError(f"{path} cannot be read ({err.strerror or err}): make it readable, or move it away to "
                            f"start a new log at step {step + 1}, and run the same command again") from None
    raw_lines = data.split(b"\n")
    cut = raw_lines.pop() if raw_lines else b""  # after the last newline: b"", or a line a kill cut short
    lines: list[tuple[int, bytes, int | None, str | None]] = []
    for number, raw in enumerate(raw_lines, 1):
        lines.append((number, raw, *step_of(raw)))
    if cut:
        found, problem = step_of(cut)
        lines.append((len(raw_lines) + 1, cut, found, "cut short: no newline" if problem else None))
    kept, past, stray, before = [], [], [], 0  # before: the step of the last good line so far
    for i, (number, raw, found, problem) in enumerate(lines):
        if problem is None:
            if found <= step:
                kept.append(raw.decode("utf-8"))
            before = max(before, found)
            continue
        after = next((s for _, _, s, p in lines[i + 1:] if p is None), None)
        if before >= step:
            past.append(f"{number} ({problem})")
        elif after == before + 1:
            stray.append(f"{number} ({problem})")
        else:
            last = before + 1 if after is None else min(after - 1, step)
            held = f"step {before + 1}" if last == before + 1 else f"one of steps {before + 1}-{last}"
            raise TrainLogError(
                f"{path} line {number} is damaged ({problem}): it held {held}, which the checkpoint (step {step}) is "
                "past and a resume cannot compute again; restore the file from a copy, or delete that line (the log "
                "then lacks that step), and run the same command again")
    notes = []
    if past:
        notes.append(f"{_lines(past)} damaged past the checkpoint's step {step}: dropped with the lines after that "
                     "step, which training writes again")
    if stray:
        notes.append(f"{_lines(stray)} damaged between the lines of two consecutive steps: dropped")
    return Kept(kept, f"{path} " + "; ".join(notes) if notes else None)


def _lines(numbers: list[str]) -> str:
    """'line 7 (why)' or 'lines 7 (why), 9 (why), 12 (why) and 4 more'."""
    if len(numbers) == 1:
        return f"line {numbers[0]}"
    more = f" and {len(numbers) - 3} more" if len(numbers) > 3 else ""
    return "lines " + ", ".join(numbers[:3]) + more
