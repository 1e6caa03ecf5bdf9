"""Data sources (a registry): tiny_shakespeare, local, hub, splits, probes.

A source turns its `SourceConfig` into two `Stream`s, train and valid (and test where it has one): a function
yielding the pieces of text to tokenize, a `key` that identifies that content (hashed into the shard's cache
key), a token cap (the source's training budget; validation is never capped) and `origin`, the text's
whereabouts for messages.
"""

from __future__ import annotations

import glob
import hashlib
import math
import os
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Callable, ClassVar, Iterator

import slm.data.hub as hub
import slm.data.readers as readers
from slm.data.config import SOURCES, SourceConfig
from slm.data.errors import DataError
from slm.data.readers import Piece

CORPORA = "corpora"
HOLDOUT_VERSION = 2
"""Bumped when the held-out split of local files changes (2: measured in characters/records/rows, not bytes);
part of its cache key, so a shard of an older split is never reused."""
MAX_REACH = 1 << 16
"""Characters a held-out text split may move to reach a point where tokenization is exact (readers.cut)."""


@dataclass
class Stream:
    """One split of one source, before tokenization."""

    source: str
    """Name of the source."""
    split: str
    """train or valid."""
    key: dict
    """Identifies the text (content hashes, or the hub coordinates); part of the cache key."""
    pieces: Callable[[], Iterator[Piece]]
    """Yields (text, ends_document) pieces in order."""
    max_tokens: int | None = None
    """Stop after this many tokens; None: the whole stream."""
    remote: bool = False
    """Read over the network (the hub): check reachability first."""
    origin: str = ""
    """Where the text comes from, for messages: the files (and which part of them), the shipped corpus, the hub."""


class Source:
    kind: ClassVar[str] = ""

    def __init__(self, cfg: SourceConfig, budget: int | None):
        self.cfg = cfg
        self.budget = budget

    def streams(self) -> dict[str, Stream]:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.cfg.name, "kind": self.kind}


def build_source(cfg: SourceConfig, budget: int | None) -> Source:
    """The source of a settled SourceConfig (its kind is one of SOURCES: the config checks it)."""
    return SOURCES.get(cfg.kind)(cfg, budget)


def _names(files: list[Path]) -> str:
    """The files for a message: all of up to three, else the first two and how many more."""
    shown = [str(p) for p in files] if len(files) <= 3 else [str(p) for p in files[:2]] + [f"{len(files) - 2} more"]
    return ", ".join(shown)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


@SOURCES.register("tiny_shakespeare")
class TinyShakespeare(Source):
    """The Tiny Shakespeare corpus shipped in this package, with its train/valid/test splits (one document each;
    the splits of arXiv 2512.20877's code)."""

    kind = "tiny_shakespeare"

    def _file(self, split: str):
        return resources.files("slm.data").joinpath(f"{CORPORA}/tiny_shakespeare/{split}.txt")

    def streams(self) -> dict[str, Stream]:
        out = {}
        for split in ("train", "valid", "test"):
            file = self._file(split)
            digest = hashlib.sha256(file.read_bytes()).hexdigest()

            def pieces(file=file) -> Iterator[Piece]:
                with resources.as_file(file) as path:
                    yield from readers.read(path, "text", "text")

            out[split] = Stream(self.cfg.name, split, {"kind": self.kind, "sha256": digest}, pieces,
                                self.budget if split == "train" else None,
                                origin=f"the shipped slm/data/{CORPORA}/tiny_shakespeare/{split}.txt")
        return out

    def describe(self) -> dict:
        return {**super().describe(), "corpus": "tiny_shakespeare (shipped in slm/data/corpora)"}


@SOURCES.register("local")
class LocalFiles(Source):
    """Local text, jsonl or parquet files (globs), with validation files or a held-out tail (`_held_out`)."""

    kind = "local"

    def __init__(self, cfg: SourceConfig, budget: int | None):
        super().__init__(cfg, budget)
        where = cfg.where
        if not cfg.paths:
            raise DataError(f"{where}.paths is empty: list the files, e.g. data=local '{where}.paths=[/data/*.jsonl]'")
        self.train_files = self._resolve(cfg.paths, f"{where}.paths")
        self.valid_files = self._resolve(cfg.valid_paths, f"{where}.valid_paths") if cfg.valid_paths else []
        self.test_files = self._resolve(cfg.test_paths, f"{where}.test_paths") if cfg.test_paths else []
        formats = {readers.detect_format(p, cfg.format, where)
                   for p in self.train_files + self.valid_files + self.test_files}
        if len(formats) > 1:
            raise DataError(f"{where} mixes formats {', '.join(sorted(formats))}; use one source per format")
        self.format = formats.pop()

    @staticmethod
    def _resolve(patterns: list[str], where: str) -> list[Path]:
        files: list[Path] = []
        for pattern in patterns:
            expanded = os.path.expanduser(pattern)
            if glob.has_magic(expanded):
                matches = [Path(m) for m in sorted(glob.glob(expanded, recursive=True)) if os.path.isfile(m)]
                if not matches:
                    raise DataError(f"{where}: no file matches {pattern!r}")
            else:
                path = Path(expanded)
                if not path.exists():
                    raise DataError(f"{where}: file not found: {pattern}")
                if path.is_dir():
                    raise DataError(f"{where}: {pattern} is a directory; use a glob such as {pattern.rstrip('/')}/*.jsonl")
                matches = [path]
            for path in matches:
                if path.stat().st_size == 0:
                    raise DataError(f"{where}: file {path} is empty")
                if path not in files:
                    files.append(path)
        return files

    def _key(self, split: str, files: list[Path], **extra) -> dict:
        pieces = {"pieces": readers.PIECES_VERSION} if self.format == "text" else {}
        return {"kind": self.kind, "split": split, "format": self.format, "text_field": self.cfg.text_field,
                "sha256": [sha256_file(p) for p in files], **pieces, **extra}

    def _stream(self, split: str, ranges: list[tuple[Path, int, int]], key: dict, origin: str) -> Stream:
        fmt, field = self.format, self.cfg.text_field

        def pieces() -> Iterator[Piece]:
            for path, start, stop in ranges:
                yield from readers.read(path, fmt, field, start, stop)

        return Stream(self.cfg.name, split, key, pieces, self.budget if split == "train" else None, origin=origin)

    def streams(self) -> dict[str, Stream]:
        whole = lambda files: [(p, 0, readers.size(p, self.format)) for p in files]  # noqa: E731
        test = {"test": self._stream("test", whole(self.test_files), self._key("test", self.test_files),
                                     _names(self.test_files))} if self.test_files else {}
        if self.valid_files:
            return {"train": self._stream("train", whole(self.train_files), self._key("train", self.train_files),
                                          _names(self.train_files)),
                    "valid": self._stream("valid", whole(self.valid_files), self._key("valid", self.valid_files),
                                          _names(self.valid_files)),
                    **test}
        train, valid = self._held_out()
        key = self._key("all", self.train_files, valid_fraction=self.cfg.valid_fraction, holdout=HOLDOUT_VERSION)
        f, unit = self.cfg.valid_fraction, readers.UNITS[self.format]
        return {"train": self._stream("train", train, {**key, "split": "train"},
                                      f"the first {100 * (1 - f):.4g}% of the {unit} of {_names(self.train_files)}"),
                "valid": self._stream("valid", valid, {**key, "split": "valid"},
                                      f"the last {100 * f:.4g}% of the {unit} of {_names(self.train_files)}"),
                **test}

    def _held_out(self) -> tuple[list[tuple[Path, int, int]], list[tuple[Path, int, int]]]:
        """(train, valid) ranges: the last valid_fraction of all the files' text in readers.UNITS (characters,
        records, rows), rounded to a whole unit; a text file is cut at the exact cut nearest that point within a
        quarter of the held-out amount (readers.cut), so each side tokenizes as it does in the whole file."""
        amounts = [readers.count(p, self.format) for p in self.train_files]
        held = math.floor(sum(amounts) * self.cfg.valid_fraction + 0.5)
        target, reach = sum(amounts) - held, min(MAX_REACH, held // 4)
        train, valid, seen = [], [], 0
        for path, n in zip(self.train_files, amounts):
            end = readers.size(path, self.format)
            if seen + n <= target:
                train.append((path, 0, end))
            elif seen >= target:
                valid.append((path, 0, end))
            else:
                point = readers.cut(path, self.format, target - seen, reach)
                train += [(path, 0, point)] if point > 0 else []
                valid += [(path, point, end)] if point < end else []
            seen += n
        return train, valid

    def describe(self) -> dict:
        out = {**super().describe(), "format": self.format, "paths": [str(p) for p in self.train_files]}
        if self.valid_files:
            out["valid_paths"] = [str(p) for p in self.valid_files]
        else:
            out["valid_fraction"] = self.cfg.valid_fraction
        if self.test_files:
            out["test_paths"] = [str(p) for p in self.test_files]
        return out


@SOURCES.register("hub")
class HubDataset(Source):
    """A Hugging Face hub dataset, streamed: validation is the first `valid_documents` documents,
    training the documents after them, up to the source's token budget."""

    kind = "hub"

    def __init__(self, cfg: SourceConfig, budget: int | None):
        super().__init__(cfg, budget)
        if not cfg.dataset:
            raise DataError(f"{cfg.where}.dataset is not set: name a hub dataset, e.g. HuggingFaceFW/fineweb-edu")
        if budget is None:
            raise DataError(f"{cfg.where}: hub dataset {cfg.dataset!r} needs a token budget; "
                            f"set data.token_budget or {cfg.where}.token_budget")

    def streams(self) -> dict[str, Stream]:
        c = self.cfg
        key = {"kind": self.kind, "dataset": c.dataset, "subset": c.subset, "split": c.split,
               "revision": c.revision, "text_field": c.text_field, "valid_documents": c.valid_documents}
        out = {}
        for split in ("train", "valid"):
            def pieces(split=split) -> Iterator[Piece]:
                skip, take = (c.valid_documents, None) if split == "train" else (0, c.valid_documents)
                for text in hub.documents(c, skip=skip, take=take):
                    yield text, True

            origin = (f"the first {c.valid_documents} documents of hub dataset {c.dataset!r}" if split == "valid"
                      else f"hub dataset {c.dataset!r} after its first {c.valid_documents} documents")
            out[split] = Stream(c.name, split, {**key, "part": split}, pieces,
                                self.budget if split == "train" else None, remote=True, origin=origin)
        return out

    def describe(self) -> dict:
        c = self.cfg
        return {**super().describe(), "dataset": c.dataset, "subset": c.subset, "split": c.split,
                "revision": c.revision, "valid_documents": c.valid_documents}


@SOURCES.register("splits")
class SplitCorpus(Source):
    """A corpus published as train/valid/test splits (PTB, WikiText-2), each read whole: the files train.txt,
    valid.txt and test.txt of a local directory (`dir`), else the hub dataset's three splits (`hub_splits`,
    a row per line). Offline with no directory set, it fails at once in one line saying how to set one."""

    kind = "splits"
    FILES = ("train.txt", "valid.txt", "test.txt")

    def __init__(self, cfg: SourceConfig, budget: int | None):
        super().__init__(cfg, budget)
        self.local: LocalFiles | None = None
        if cfg.dir:
            root = Path(os.path.expanduser(cfg.dir))
            missing = [name for name in self.FILES if not (root / name).is_file()]
            if missing:
                raise DataError(f"{cfg.where}.dir={cfg.dir}: {', '.join(missing)} not found there "
                                f"(the layout is {', '.join(self.FILES)})")
            files = replace(cfg, kind="local", format="text", paths=[str(root / self.FILES[0])],
                            valid_paths=[str(root / self.FILES[1])], test_paths=[str(root / self.FILES[2])])
            files.where = cfg.where
            self.local = LocalFiles(files, budget)
        elif not cfg.dataset:
            raise DataError(f"{cfg.where}: set dir (a directory holding {', '.join(self.FILES)}) "
                            "or dataset (a hub id)")

    def streams(self) -> dict[str, Stream]:
        if self.local is not None:
            return self.local.streams()
        c = self.cfg
        instead = (f"put {', '.join(self.FILES)} in a directory and set {c.where}.dir=/path/to/it")
        out = {}
        for split, hub_split in zip(("train", "valid", "test"), c.hub_splits):
            def pieces(hub_split=hub_split) -> Iterator[Piece]:
                for line in hub.documents(c, split=hub_split, instead=instead):
                    yield (line if line.endswith("\n") else line + "\n"), False

            key = {"kind": self.kind, "dataset": c.dataset, "subset": c.subset, "split": hub_split,
                   "revision": c.revision, "text_field": c.text_field}
            out[split] = Stream(c.name, split, key, pieces, self.budget if split == "train" else None, remote=True,
                                origin=f"split {hub_split!r} of hub dataset {c.dataset!r}")
        return out

    def describe(self) -> dict:
        c = self.cfg
        if self.local is not None:
            return {**super().describe(), "dir": c.dir}
        return {**super().describe(), "dataset": c.dataset, "subset": c.subset, "splits": c.hub_splits,
                "revision": c.revision}


@SOURCES.register("probes")
class ProbesAlphabet(Source):
    """The synthetic probes' alphabet (slm.probes.tasks.ALPHABET) as the text of every split: what a fitted tokenizer
    (char) learns its ids from under data=probes, whose records are data.records (docs/probes.md). Nothing to read
    from disk, so every task and every run has the same ids."""

    kind = "probes"

    def streams(self) -> dict[str, Stream]:
        from slm.probes.tasks import ALPHABET

        digest = hashlib.sha256(ALPHABET.encode()).hexdigest()

        def pieces() -> Iterator[Piece]:
            yield ALPHABET, True

        return {split: Stream(self.cfg.name, split, {"kind": self.kind, "sha256": digest}, pieces,
                              self.budget if split == "train" else None, origin="the probes' alphabet (slm/probes)")
                for split in ("train", "valid")}
