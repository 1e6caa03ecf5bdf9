"""Token shards: one stream tokenized once into a flat file of uint16 (vocab <= 65536) or uint32 ids.

`build_shard` reuses a complete shard from the cache; otherwise, holding the shard's lock, it tokenizes
the stream's pieces in chunks of ~256K characters on every core (threads for tokenizers that release the
GIL, forked worker processes for the others), appends the eot id after each document, shows a progress
bar on stderr (on a terminal; elsewhere its last state as one plain line, slm.plain_progress), and writes
`<key>.bin` then `<key>.json` atomically. The bin file is read back as a memmap.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections import deque
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from tqdm import tqdm

import slm.data.cache as cache
from slm.data.errors import DataError
from slm.data.readers import Piece
from slm.data.sources import Stream
from slm.data.tokenizers import Tokenizer
from slm.plain_progress import plain_lines

CHUNK_CHARS = 1 << 18
FORMAT_VERSION = 1


SHARD_DTYPES = ("<u2", "<u4")
"""The token id types a shard is written in (shard_dtype)."""


def shard_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass
class Shard:
    """A tokenized stream in the cache."""

    path: Path
    """The .bin file of ids."""
    key: str
    """Cache key (file stem)."""
    n_tokens: int
    """Number of ids in the file."""
    dtype: str
    """numpy dtype of the ids: <u2 or <u4."""
    meta: dict
    """The .json metadata (source, split, tokenizer, content hash, timing)."""
    built: bool = False
    """Tokenized by this call (False: reused from the cache)."""
    _tokens: np.ndarray | None = field(default=None, repr=False, compare=False)

    def tokens(self) -> np.ndarray:
        """The ids, shape (n_tokens,), memory-mapped read-only (opened on first use in each process)."""
        if self._tokens is None:
            if self.n_tokens == 0:
                self._tokens = np.empty(0, dtype=self.dtype)
            else:
                mm = np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.n_tokens,))
                self._tokens = mm.view(np.ndarray)  # a plain view (it keeps the map): cheaper to index
        return self._tokens

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokens": None}  # workers re-open the memmap instead of copying it


def damaged_meta(path: Path, problem: str, *also: Path) -> DataError:
    """The error for a data-cache metadata file that cannot be used: names it and how to clear it."""
    files = " ".join(str(p) for p in (path, *also))
    return DataError(f"data cache metadata {path} is damaged ({problem}): delete it (rm {files}) and run again; the "
                     "entry is built again (or clear the whole cache, $SLM_CACHE or data.cache_dir)")


def read_meta(path: Path, fields: dict[str, type] | None = None, *also: Path) -> dict | None:
    """A cache entry's .json metadata, None when there is none. A file that is not a JSON object holding `fields`
    (their types) raises `damaged_meta`, naming it and the files to delete (`also` beside it)."""
    import json

    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as err:
        raise damaged_meta(path, f"cannot be read: {err.strerror or err}", *also) from None
    except (UnicodeDecodeError, ValueError) as err:
        raise damaged_meta(path, f"not JSON: {' '.join(str(err).split())[:120]}", *also) from None
    if not isinstance(meta, dict):
        raise damaged_meta(path, f"a JSON {type(meta).__name__}, not an object", *also)
    for name, kind in (fields or {}).items():
        value = meta.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise damaged_meta(path, f"{name}={value!r}, expected {kind.__name__}", *also)
    return meta


def load_shard(root: Path, key: str) -> Shard | None:
    bin_path = cache.entry(root, "tokens", f"{key}.bin")
    meta_path = cache.entry(root, "tokens", f"{key}.json")
    meta = read_meta(meta_path, {"n_tokens": int, "dtype": str}, *([bin_path] if bin_path.exists() else []))
    if meta is None:
        return None
    if meta["n_tokens"] < 0 or meta["dtype"] not in SHARD_DTYPES:
        raise damaged_meta(meta_path, f"n_tokens={meta['n_tokens']!r}, dtype={meta['dtype']!r}", bin_path)
    itemsize = np.dtype(meta["dtype"]).itemsize
    path = bin_path
    size = path.stat().st_size if path.is_file() else -1
    if size != meta["n_tokens"] * itemsize:
        raise DataError(f"cache entry {path} is damaged ({size} bytes for {meta['n_tokens']} tokens); delete it and rerun")
    return Shard(path, key, meta["n_tokens"], meta["dtype"], meta)


def build_shard(root: Path, key: str, stream: Stream, tokenizer: Tokenizer, dtype: np.dtype,
                num_proc: int | None = None) -> Shard:
    """The shard of `stream`: from the cache, or tokenized now (once, even with concurrent jobs)."""
    shard = load_shard(root, key)
    if shard is not None:
        return shard
    label = f"{stream.source}/{stream.split}"
    with cache.locked(root, key, f"tokenizing {label}"):
        shard = load_shard(root, key)  # a job that held the lock before us may have built it
        if shard is not None:
            return shard
        path = cache.entry(root, "tokens", f"{key}.bin")
        cache.remove_stale(path)
        tmp = cache.temp_path(path)
        start = time.perf_counter()
        try:
            n, digest = _write(tmp, stream, tokenizer, dtype, num_proc or default_workers(), label)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, path)
        meta = {"format_version": FORMAT_VERSION, "key": key, "source": stream.source, "split": stream.split,
                "n_tokens": n, "dtype": dtype.str, "stream": stream.key, "max_tokens": stream.max_tokens,
                "tokenizer": tokenizer.name, "tokenizer_fingerprint": tokenizer.fingerprint(),
                "text_sha256": digest, "tokenize_seconds": round(time.perf_counter() - start, 3),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid()}
        cache.write_json(cache.entry(root, "tokens", f"{key}.json"), meta)
    return Shard(path, key, n, dtype.str, meta, built=True)


def _write(tmp: Path, stream: Stream, tokenizer: Tokenizer, dtype: np.dtype, workers: int, label: str) -> tuple[int, str]:
    """Tokenize the stream into `tmp`; return (tokens written, sha256 of the text read)."""
    digest = hashlib.sha256()
    limit, n = stream.max_tokens, 0
    encoded = _encode_all(_chunks(stream.pieces(), digest), tokenizer, workers, label)
    bar = tqdm(total=limit, desc=f"tokenize {label}", unit="tok", unit_scale=True, file=plain_lines(sys.stderr),
               mininterval=1.0, dynamic_ncols=True)
    try:
        with open(tmp, "wb") as f:
            for ids in encoded:
                if limit is not None:
                    ids = ids[: limit - n]
                f.write(ids.astype(dtype).tobytes())
                n += len(ids)
                bar.update(len(ids))
                if limit is not None and n >= limit:
                    break
            f.flush()
            os.fsync(f.fileno())
    finally:
        encoded.close()
        bar.close()
    return n, digest.hexdigest()


def _chunks(pieces: Iterable[Piece], digest) -> Iterator[list[Piece]]:
    chunk, size = [], 0
    try:
        for text, ends in pieces:
            digest.update(text.encode("utf-8", "surrogatepass"))
            chunk.append((text, ends))
            size += len(text)
            if size >= CHUNK_CHARS:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk
    finally:
        getattr(pieces, "close", lambda: None)()


def encode_chunk(tokenizer: Tokenizer, chunk: list[Piece]) -> np.ndarray:
    """Ids of the pieces, the eot id after each piece that ends a document. Shape (n,), int64."""
    parts: list[np.ndarray] = []
    eot = None if tokenizer.eot_id is None else np.array([tokenizer.eot_id], dtype=np.int64)
    for ids, (_, ends) in zip(tokenizer.encode_batch([text for text, _ in chunk]), chunk):
        parts.append(np.asarray(ids, dtype=np.int64))
        if ends and eot is not None:
            parts.append(eot)
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


_WORKER_TOKENIZER: list[Tokenizer] = []  # inherited by forked worker processes


def _encode_in_worker(chunk: list[Piece]) -> np.ndarray:
    return encode_chunk(_WORKER_TOKENIZER[0], chunk)


def _encode_all(chunks: Iterator[list[Piece]], tokenizer: Tokenizer, workers: int, label: str) -> Iterator[np.ndarray]:
    """encode_chunk over the chunks in order, `workers` at a time, at most 2 x workers chunks ahead."""
    pool: Executor | None = None
    if workers > 1 and tokenizer.threads:
        pool, fn = ThreadPoolExecutor(workers), partial(encode_chunk, tokenizer)
    elif workers > 1:
        _WORKER_TOKENIZER[:] = [tokenizer]
        pool, fn = ProcessPoolExecutor(workers, mp_context=get_context("fork")), _encode_in_worker
    pending: deque = deque()
    try:
        for chunk in chunks:
            if pool is None:
                yield _with_context(lambda: encode_chunk(tokenizer, chunk), label)
                continue
            pending.append(pool.submit(fn, chunk))
            if len(pending) >= 2 * workers:
                yield _with_context(pending.popleft().result, label)
        while pending:
            yield _with_context(pending.popleft().result, label)
    finally:
        chunks.close()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _with_context(fn, label: str) -> np.ndarray:
    try:
        return fn()
    except DataError as err:
        raise DataError(f"{label}: {err}") from None
