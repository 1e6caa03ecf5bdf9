"""Post-training records from local JSONL files, in TRL's standard formats: `prompt`/`completion` (SFT) and
`prompt`/`chosen`/`rejected` (preference pairs), each field a string.

Every record is checked as it is read, so a bad file is refused before training with one line naming the file, the
line and the problem (`pairs.jsonl:12: chosen and rejected are the same text: ...`): a line that is not a JSON
object, a missing field, a field that is not a string (TRL's conversational format, lists of messages, is not read),
an empty or blank completion, chosen equal to rejected, and, given a `tokenize` callable and a context length, a
prompt that with its completion is longer than the context. Other fields (ids, metadata) are ignored; a prompt may
be empty; blank lines are skipped. The prompt and each completion are tokenized apart and their counts added,
as training joins them (the boundary between prompt and completion is a token boundary).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from slm.data.errors import DataError

SFT_FIELDS = ("prompt", "completion")
PREFERENCE_FIELDS = ("prompt", "chosen", "rejected")
Tokenize = Callable[[str], Sequence[int]]
"""Text to its token ids (a tokenizer's encode)."""

_JSON_TYPES = {dict: "an object", list: "a list", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}


@dataclass(frozen=True)
class SFTRecord:
    """One supervised example: the completion is trained, the prompt is context only."""

    prompt: str
    completion: str


@dataclass(frozen=True)
class PreferenceRecord:
    """One preference pair: two completions of the prompt, the chosen preferred to the rejected."""

    prompt: str
    chosen: str
    rejected: str


def read_sft_records(path: str | Path, *, tokenize: Tokenize | None = None,
                     context_length: int | None = None) -> list[SFTRecord]:
    """The `prompt`/`completion` records of a JSONL file, checked (module docstring); a bad one is a DataError."""
    return [SFTRecord(*texts) for texts in _read(Path(path), SFT_FIELDS, tokenize, context_length)]


def read_preference_records(path: str | Path, *, tokenize: Tokenize | None = None,
                            context_length: int | None = None) -> list[PreferenceRecord]:
    """The `prompt`/`chosen`/`rejected` records of a JSONL file, checked (module docstring), chosen and rejected
    different; a bad one is a DataError."""
    return [PreferenceRecord(*texts) for texts in _read(Path(path), PREFERENCE_FIELDS, tokenize, context_length)]


def _read(path: Path, fields: tuple[str, ...], tokenize: Tokenize | None,
          context_length: int | None) -> Iterator[tuple[str, ...]]:
    """Each record's fields, in the order of `fields`, once it has passed every check."""
    if (tokenize is None) != (context_length is None):
        raise ValueError("give both tokenize and context_length, or neither")
    found = False
    for line, row in _objects(path):
        texts = tuple(row.get(name) for name in fields)
        problem = _field_problem(row, fields) or _problem(dict(zip(fields, texts)), tokenize, context_length)
        if problem:
            raise DataError(f"{path}:{line}: {problem}")
        found = True
        yield texts
    if not found:
        raise DataError(f"{path}: no records (a JSONL file of objects with fields {', '.join(fields)})")


def _objects(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, JSON object) for each non-blank line."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as err:
        raise DataError(f"{path}: cannot read the records: {err.strerror or err}") from None
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise DataError(f"{path}:{number}: not UTF-8 text (byte {err.start + 1} of the line)") from None
        except json.JSONDecodeError as err:
            raise DataError(f"{path}:{number}: not JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{number}: {_JSON_TYPES.get(type(row), 'a string')}, not a JSON object")
        yield number, row


def _field_problem(row: dict, fields: tuple[str, ...]) -> str | None:
    """What is wrong with the fields of a record: one missing, or not a string; None when nothing is."""
    for name in fields:
        if name not in row:
            kind = "a preference record" if "chosen" in fields else "an SFT record"
            return f"missing field {name!r} ({kind} has {', '.join(fields)})"
        value = row[name]
        if not isinstance(value, str):
            hint = " (TRL's conversational format, a list of messages, is not read: give the text)" \
                if isinstance(value, list) else ""
            return f"field {name!r} is {_JSON_TYPES.get(type(value), type(value).__name__)}, not a string{hint}"
    return None


def _problem(record: dict[str, str], tokenize: Tokenize | None, context_length: int | None) -> str | None:
    """What is wrong with a record whose fields are strings, in words; None when nothing is."""
    completions = [name for name in record if name != "prompt"]
    for name in completions:
        if not record[name].strip():
            return f"field {name!r} is {'empty' if not record[name] else 'only whitespace'}: a completion " \
                   "must have text"
    if len(completions) == 2 and record["chosen"] == record["rejected"]:
        return "chosen and rejected are the same text: a pair needs two different completions"
    if tokenize is None:
        return None
    prompt = len(tokenize(record["prompt"]))
    for name in completions:
        total = prompt + len(tokenize(record[name]))
        if total > context_length:
            return f"prompt + {name} is {total} tokens ({prompt} + {total - prompt}), more than the {context_length} " \
                   "a sequence may have (the model's context + 1)"
    return None
