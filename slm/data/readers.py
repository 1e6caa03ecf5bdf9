"""Local files as a stream of pieces `(text, ends_document)`, and where a file may be split in two.

text: a file is one document, read in ~256 KB pieces cut where GPT-2's pre-tokenizer ends a token whatever
follows (after "x\n" before "Y", between the newlines of "\n\nY", before the space of "x Y", ... where x and Y
are any characters that are not whitespace: letters of any script, CJK, emoji, digits, punctuation), so the
pieces tokenize exactly like the whole file with gpt2, char and word.
jsonl and parquet: a record is one document, its text in `text_field`.

A range of a file is given in positions: bytes for text and jsonl, rows for parquet (`size`). A held-out share
is measured in units of text (`count`): characters for text, records for jsonl, rows for parquet; `cut` turns
a number of units into the position where a file is split.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np

from slm.data.errors import DataError

PIECE_BYTES = 1 << 18
PIECES_VERSION = 2
"""Bumped when the pieces of a text file change (2: cuts next to non-ASCII characters); part of cache keys."""
Piece = tuple[str, bool]
EXTENSIONS = {".txt": "text", ".text": "text", ".md": "text", ".jsonl": "jsonl", ".ndjson": "jsonl",
              ".parquet": "parquet", ".pq": "parquet"}
UNITS = {"text": "characters", "jsonl": "records", "parquet": "rows"}
"""What a held-out share of each format is measured in (`count`)."""
_ASCII_SOLID = bytes(not chr(b).isspace() for b in range(128))
_MARGIN = 8  # bytes around a position that decide whether it is a cut (a character before, two after)


def detect_format(path: Path, fmt: str, where: str) -> str:
    if fmt != "auto":
        return fmt
    found = EXTENSIONS.get(path.suffix.lower())
    if found is None:
        raise DataError(f"{where}.format=auto cannot tell the format of {path} (extension {path.suffix!r}); "
                        f"set {where}.format to text, jsonl or parquet")
    return found


def size(path: Path, fmt: str) -> int:
    """End position of a file: rows for parquet, bytes otherwise (what `read` takes)."""
    if fmt == "parquet":
        return _parquet(path).metadata.num_rows
    return path.stat().st_size


def count(path: Path, fmt: str) -> int:
    """Amount of text in a file, in UNITS[fmt]: characters (text), non-blank lines (jsonl), rows (parquet)."""
    if fmt == "parquet":
        return size(path, fmt)
    if fmt == "jsonl":
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    n = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            n += _chars(block)
    return n


def cut(path: Path, fmt: str, n: int, reach: int = 0) -> int:
    """The position where a file is split after its first `n` units (UNITS[fmt]).

    jsonl and parquet: after record (row) n. text: at the cut nearest character n (see the module
    docstring) within `reach` characters either way, so that both sides tokenize as in the whole file; with
    none there (text without whitespace, such as CJK without spaces), at character n itself."""
    if fmt == "parquet":
        return max(0, min(n, size(path, fmt)))
    end = path.stat().st_size
    if n <= 0:
        return 0
    if fmt == "jsonl":
        with open(path, "rb") as f:
            for line in f:
                n -= bool(line.strip())
                if n <= 0:
                    return f.tell()
        return end
    lo, at, hi = _char_offsets(path, (max(0, n - reach), n, n + reach))
    if at >= end:
        return end
    base = max(0, lo - _MARGIN)
    with open(path, "rb") as f:
        f.seek(base)
        buf = f.read(min(end, hi + _MARGIN) - base)
    at -= base
    found = [c for c in (_next_cut(buf, at, hi - base), _previous_cut(buf, lo - base, at)) if c >= 0]
    if not found:
        return at + base
    return base + min(found, key=lambda c: (_chars(buf[min(c, at):max(c, at)]), -c))  # nearest in characters


def read(path: Path, fmt: str, text_field: str, start: int = 0, stop: int | None = None) -> Iterator[Piece]:
    """The pieces of positions [start, stop) of a file; start and stop must come from `cut` or `size`."""
    stop = size(path, fmt) if stop is None else stop
    if fmt == "text":
        return _text(path, start, stop)
    if fmt == "jsonl":
        return _jsonl(path, text_field, start, stop)
    return _parquet_rows(path, text_field, start, stop)


def _char_offsets(path: Path, marks: tuple[int, ...]) -> list[int]:
    """Byte offset where character number m starts, for each m of the ascending `marks` (the file's size
    for m past its end)."""
    out: list[int] = []
    seen = pos = 0
    with open(path, "rb") as f:
        while len(out) < len(marks) and (block := f.read(1 << 22)):
            starts = np.flatnonzero((np.frombuffer(block, dtype=np.uint8) & 0xC0) != 0x80)
            while len(out) < len(marks) and marks[len(out)] < seen + len(starts):
                out.append(pos + int(starts[marks[len(out)] - seen]))
            seen, pos = seen + len(starts), pos + len(block)
    return out + [pos] * (len(marks) - len(out))


def _chars(buf: bytes) -> int:
    """Characters in UTF-8 bytes (those that do not continue a character)."""
    return int(np.count_nonzero((np.frombuffer(buf, dtype=np.uint8) & 0xC0) != 0x80))


def _solid_at(buf: bytes, i: int) -> int:
    """Byte length of the character starting at i if it is whole in buf and not whitespace (str.isspace:
    Unicode's White_Space and Python's own, as GPT-2's and the word tokenizer's patterns see it), else 0."""
    if not 0 <= i < len(buf):
        return 0
    lead = buf[i]
    if lead < 0x80:
        return _ASCII_SOLID[lead]
    n = 2 if 0xC2 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4 if 0xF0 <= lead < 0xF5 else 0
    if not n or i + n > len(buf):
        return 0
    try:
        char = buf[i:i + n].decode("utf-8")
    except UnicodeDecodeError:
        return 0
    return 0 if char.isspace() else n


def _solid_before(buf: bytes, i: int) -> bool:
    """The character ending just before byte i is whole in buf and not whitespace."""
    j = i - 1
    while j > 0 and i - j < 4 and 0x80 <= buf[j] < 0xC0:
        j -= 1
    return j >= 0 and _solid_at(buf, j) == i - j


def _newline_cut(buf: bytes, i: int) -> bool:
    """Cut at i after a newline: "x\nY" (a lone newline), or "\n" + one last whitespace + "Y" ("\n\nY",
    "\n Y"): GPT-2's pre-tokenizer ends a token there whatever follows, also at the end of a piece."""
    if not 2 <= i < len(buf) or buf[i - 1] != 0x0A:
        return False
    if _solid_at(buf, i):
        return _solid_before(buf, i - 1)
    return buf[i] in b" \t\n\r" and bool(_solid_at(buf, i + 1))


def _space_cut(buf: bytes, i: int) -> bool:
    """Cut at i before the space of "x Y" (for text with no usable newline)."""
    return 1 <= i < len(buf) and buf[i] == 0x20 and _solid_before(buf, i) and bool(_solid_at(buf, i + 1))


_SEPARATORS = ((b"\n", _newline_cut, 1), (b" ", _space_cut, 0))  # (byte, test, cut position - byte position)


def _next_cut(buf: bytes, begin: int, end: int) -> int:
    """The first cut i with begin <= i <= end, or -1."""
    best = -1
    for sep, ok, shift in _SEPARATORS:
        i = buf.find(sep, max(0, begin - shift), max(0, end - shift + 1))
        while i >= 0:
            if ok(buf, i + shift):
                best = i + shift if best < 0 else min(best, i + shift)
                break
            i = buf.find(sep, i + 1, max(0, end - shift + 1))
    return best


def _previous_cut(buf: bytes, begin: int, end: int) -> int:
    """The last cut i with begin <= i <= end, or -1."""
    best = -1
    for sep, ok, shift in _SEPARATORS:
        i = buf.rfind(sep, max(0, begin - shift), max(0, end - shift + 1))
        while i >= 0:
            if ok(buf, i + shift):
                best = max(best, i + shift)
                break
            i = buf.rfind(sep, max(0, begin - shift), i)
    return best


def _last_cut(buf: bytes, begin: int = 0) -> int:
    """The last cut >= begin in buf, a newline's before a space's, or 0."""
    for sep, ok, shift in _SEPARATORS:
        i = buf.rfind(sep, max(0, begin - shift))
        while i >= 0:
            if ok(buf, i + shift):
                return i + shift
            i = buf.rfind(sep, max(0, begin - shift), i)
    return 0


def _decode(buf: bytes, path: Path, offset: int) -> str:
    try:
        return buf.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: invalid UTF-8 at byte {offset + err.start} ({buf[err.start:err.start + 4]!r}); "
                        "text sources must be UTF-8") from None


def _text(path: Path, start: int, stop: int) -> Iterator[Piece]:
    ends = stop == path.stat().st_size
    with open(path, "rb") as f:
        f.seek(start)
        carry, at, left, bare = b"", start, stop - start, 0
        while left > 0:
            block = f.read(min(PIECE_BYTES, left))
            if not block:
                break
            left -= len(block)
            buf = carry + block
            # the first `bare` bytes hold no cut (but near their end, where what follows was missing): skip them
            split = _last_cut(buf, max(0, bare - _MARGIN)) if left > 0 else len(buf)
            if split:
                yield _decode(buf[:split], path, at), ends and left <= 0 and split == len(buf)
                at += split
            carry = buf[split:]
            bare = 0 if split else len(buf)
        if carry:
            yield _decode(carry, path, at), ends


def _jsonl(path: Path, field: str, start: int, stop: int) -> Iterator[Piece]:
    with open(path, "rb") as f:
        f.seek(start)
        at = start
        while at < stop:
            line = f.readline()
            if not line:
                break
            offset, at = at, at + len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(_decode(line, path, offset))
            except json.JSONDecodeError as err:
                raise DataError(f"{path}: byte {offset}: not valid JSON ({err.msg}); jsonl needs one object per line") from None
            if not isinstance(record, dict) or field not in record:
                keys = ", ".join(record) if isinstance(record, dict) else type(record).__name__
                raise DataError(f"{path}: byte {offset}: the record has no field {field!r} (it has: {keys}); "
                                "set the source's text_field")
            text = record[field]
            if text is None:
                continue
            if not isinstance(text, str):
                raise DataError(f"{path}: byte {offset}: field {field!r} is a {type(text).__name__}, not text")
            yield text, True


def _parquet(path: Path):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises several kinds for a file that is not parquet
        raise DataError(f"{path}: cannot read as parquet ({' '.join(str(err).split())})") from None


def _parquet_rows(path: Path, field: str, start: int, stop: int) -> Iterator[Piece]:
    pf = _parquet(path)
    names = pf.schema_arrow.names
    if field not in names:
        raise DataError(f"{path}: no column {field!r} (columns: {', '.join(names)}); set the source's text_field")
    row = 0
    try:
        for batch in pf.iter_batches(columns=[field], batch_size=1024):
            n = batch.num_rows
            if row + n > start:
                for text in batch.column(0).to_pylist()[max(0, start - row):stop - row]:
                    if text is not None:
                        yield str(text), True
            row += n
            if row >= stop:
                return
    except DataError:
        raise
    except Exception as err:
        raise DataError(f"{path}: cannot read column {field!r} ({' '.join(str(err).split())})") from None
