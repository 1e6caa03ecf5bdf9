"""Local files as a stream of pieces `(text, ends_document)`.

text: a file is one document, read in ~256 KB pieces cut where GPT-2's pre-tokenizer ends a token whatever
follows (after "x\n" before "Y", between the newlines of "\n\nY", ...), so the pieces tokenize exactly like
the whole file with gpt2, char and word.
jsonl and parquet: a record is one document, its text in `text_field`. A range of a file is given in
"units": bytes for text and jsonl, rows for parquet (a held-out fraction is measured in them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from slm.data.errors import DataError

PIECE_BYTES = 1 << 18
Piece = tuple[str, bool]
EXTENSIONS = {".txt": "text", ".text": "text", ".md": "text", ".jsonl": "jsonl", ".ndjson": "jsonl",
              ".parquet": "parquet", ".pq": "parquet"}


def detect_format(path: Path, fmt: str, where: str) -> str:
    if fmt != "auto":
        return fmt
    found = EXTENSIONS.get(path.suffix.lower())
    if found is None:
        raise DataError(f"{where}.format=auto cannot tell the format of {path} (extension {path.suffix!r}); "
                        f"set {where}.format to text, jsonl or parquet")
    return found


def units(path: Path, fmt: str) -> int:
    """Size of a file in the units of its format: rows for parquet, bytes otherwise."""
    if fmt == "parquet":
        return _parquet(path).metadata.num_rows
    return path.stat().st_size


def cut(path: Path, fmt: str, offset: int) -> int:
    """The first point >= offset where a file may be split between two ranges."""
    size = units(path, fmt)
    if offset <= 0 or offset >= size or fmt == "parquet":
        return max(0, min(offset, size))
    with open(path, "rb") as f:
        if fmt == "jsonl":
            f.seek(offset - 1)
            f.readline()  # the rest of the line holding byte offset - 1
            return f.tell()
        pos = max(0, offset - 2)  # a cut at i looks at bytes i - 2 .. i + 1
        while True:
            f.seek(pos)
            block = f.read(PIECE_BYTES)
            found = _first_cut(block, offset - pos)
            if found >= 0:
                return pos + found
            if pos + len(block) >= size:
                return size
            pos += len(block) - 3


def read(path: Path, fmt: str, text_field: str, start: int = 0, stop: int | None = None) -> Iterator[Piece]:
    """The pieces of units [start, stop) of a file; start and stop must come from `cut`."""
    stop = units(path, fmt) if stop is None else stop
    if fmt == "text":
        return _text(path, start, stop)
    if fmt == "jsonl":
        return _jsonl(path, text_field, start, stop)
    return _parquet_rows(path, text_field, start, stop)


def _printable(byte: int) -> bool:
    return 0x21 <= byte <= 0x7E


def _newline_cut(buf: bytes, i: int) -> bool:
    """Cut at i after a newline: "x\nY" (a lone newline), or "\n" + one last whitespace + "Y" ("\n\nY",
    "\n Y"): GPT-2's pre-tokenizer ends a token there whatever follows, also at the end of a piece."""
    if i < 2 or i + 1 >= len(buf) or buf[i - 1] != 0x0A:
        return False
    if _printable(buf[i]):
        return _printable(buf[i - 2])
    return buf[i] in b" \t\n\r" and _printable(buf[i + 1])


def _space_cut(buf: bytes, i: int) -> bool:
    """Cut at i before the space of "x Y" (for text with no usable newline)."""
    return 1 <= i < len(buf) - 1 and buf[i] == 0x20 and _printable(buf[i - 1]) and _printable(buf[i + 1])


def _first_cut(buf: bytes, begin: int) -> int:
    """The first cut >= begin in buf, or -1."""
    for sep, ok, shift in ((b"\n", _newline_cut, 1), (b" ", _space_cut, 0)):
        i = buf.find(sep, max(0, begin - shift))
        while i >= 0:
            if i + shift >= begin and ok(buf, i + shift):
                return i + shift
            i = buf.find(sep, i + 1)
    return -1


def _last_cut(buf: bytes) -> int:
    """The last cut in buf, or 0."""
    for sep, ok, shift in ((b"\n", _newline_cut, 1), (b" ", _space_cut, 0)):
        i = buf.rfind(sep)
        while i >= 0:
            if ok(buf, i + shift):
                return i + shift
            i = buf.rfind(sep, 0, i)
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
        carry, at, left = b"", start, stop - start
        while left > 0:
            block = f.read(min(PIECE_BYTES, left))
            if not block:
                break
            left -= len(block)
            buf = carry + block
            split = _last_cut(buf) if left > 0 else len(buf)
            if split:
                yield _decode(buf[:split], path, at), ends and left <= 0 and split == len(buf)
                at += split
            carry = buf[split:]
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
