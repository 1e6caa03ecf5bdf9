"""`TokenizerConfig`, `SourceConfig`, `DataConfig`: the `tokenizer` and `data` nodes of a run config.

Each `from_node` takes the composed Hydra node as a plain dict, rejects unknown keys and checks values,
so a typo fails before any data is read. The YAML files in `conf/tokenizer/` and `conf/data/` set every
field with a one-line comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from slm.data.errors import DataError

FORMATS = ("auto", "text", "jsonl", "parquet")


def _check_keys(cls, node: Any, where: str) -> dict:
    if not isinstance(node, dict):
        raise DataError(f"{where} must be a mapping, got {type(node).__name__} {node!r}")
    names = [f.name for f in fields(cls)]
    for key in node:
        if key not in names:
            raise DataError(f"unknown key {where}.{key}; choose one of: {', '.join(names)}")
    return dict(node)


def _count(value: Any, where: str, *, optional: bool = False, minimum: int = 1) -> int | None:
    """An integer >= minimum (an integral float such as 2e9 is accepted), or None where optional."""
    if value is None and optional:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        allowed = f"an integer >= {minimum}" + (" or null" if optional else "")
        raise DataError(f"{where}={value!r} is invalid: must be {allowed}")
    return value


def _paths(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{where}={value!r} is invalid: must be a list of paths or globs")
    return list(value)


@dataclass
class TokenizerConfig:
    kind: str = "char"
    """Registry key: char, word, gpt2, hf."""
    pad_vocab_multiple: int = 1
    """Round the model's vocab_size up to a multiple of this (64 turns GPT-2's 50257 into 50304)."""
    eot: bool = False
    """Separate documents with an end-of-text id: gpt2's <|endoftext|>, hf's eot_token, a new <eot> for char/word."""
    unk: bool = False
    """char/word: add <unk> for symbols outside the fitted vocabulary; without it such a symbol is an error."""
    newlines: bool = True
    """word: a newline is a token of its own; false treats it as whitespace (str.split(), as PTB and WikiText-2
    are usually read, e.g. by arXiv 2512.20877)."""
    max_vocab: int | None = None
    """char/word: keep only the most frequent symbols (ties by symbol order), specials excluded; null keeps all."""
    fit_max_chars: int | None = 100_000_000
    """char/word: characters of each source's training split read to fit the vocabulary; null reads all."""
    path: str | None = None
    """hf: a local tokenizer directory (tokenizer.json, or files AutoTokenizer reads); nothing is downloaded."""
    eot_token: str | None = None
    """hf: text of the end-of-text token; null takes the eos_token of tokenizer_config.json."""
    mask: bool = False
    """Reserve a mask token after every other id (masked diffusion): <mask> for char/word, the first spare row
    of a padded vocabulary for gpt2/hf. slm-train turns it on when the objective needs one."""

    @classmethod
    def from_node(cls, node: dict) -> "TokenizerConfig":
        return cls(**_check_keys(cls, node, "tokenizer"))

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str):
            raise DataError(f"tokenizer.kind={self.kind!r} is invalid: must be a registry key string")
        self.pad_vocab_multiple = _count(self.pad_vocab_multiple, "tokenizer.pad_vocab_multiple")
        self.max_vocab = _count(self.max_vocab, "tokenizer.max_vocab", optional=True)
        self.fit_max_chars = _count(self.fit_max_chars, "tokenizer.fit_max_chars", optional=True)
        for name in ("eot", "unk", "mask", "newlines"):
            if not isinstance(getattr(self, name), bool):
                raise DataError(f"tokenizer.{name}={getattr(self, name)!r} is invalid: must be true or false")

    def padded(self, vocab_size: int) -> int:
        m = self.pad_vocab_multiple
        return -(-vocab_size // m) * m


@dataclass
class SourceConfig:
    name: str = ""
    """Label in records and in cache file names, distinct within a mix; empty derives it from kind/dataset."""
    kind: str = "tiny_shakespeare"
    """Registry key: tiny_shakespeare (shipped corpus), local (files), hub (Hugging Face dataset, streamed),
    splits (a corpus published as train/valid/test: a local directory, else the hub's three splits)."""
    weight: float = 1.0
    """Share of training samples (and validation batches) drawn from this source; normalised over the mix."""
    token_budget: int | None = None
    """Training tokens prepared from this source; null takes weight x data.token_budget (or all for files)."""
    paths: list[str] = field(default_factory=list)
    """local: files or globs (** allowed) of the training split, or of all text when valid_paths is empty."""
    valid_paths: list[str] = field(default_factory=list)
    """local: files or globs of the validation split; empty holds out the last valid_fraction instead."""
    test_paths: list[str] = field(default_factory=list)
    """local: files or globs of the test split (scored after training with train.validation.windows); empty: none."""
    valid_fraction: float = 0.05
    """local without valid_paths: share held out for validation, from the end: of the characters of text files,
    the records of jsonl, the rows of parquet (rounded to a whole one; a text split moves to the nearest point
    where tokenization is exact, within a quarter of the held-out part)."""
    format: str = "auto"
    """local: text (a file is one document), jsonl or parquet (a record is one); auto picks by file extension."""
    text_field: str = "text"
    """jsonl/parquet/hub: the field holding a document's text."""
    dataset: str | None = None
    """hub: dataset repository id, e.g. HuggingFaceFW/fineweb-edu."""
    subset: str | None = None
    """hub: dataset config name (e.g. sample-10BT), null for the default."""
    split: str = "train"
    """hub: the split streamed; validation is held out from its start."""
    revision: str | None = None
    """hub: git revision of the dataset; null is the main branch."""
    valid_documents: int = 1000
    """hub: documents at the start of the stream held out for validation; training streams the rest."""
    dir: str | None = None
    """splits: a local directory holding train.txt, valid.txt and test.txt; null reads the hub's splits instead."""
    hub_splits: list[str] = field(default_factory=lambda: ["train", "validation", "test"])
    """splits: the hub's names of the train, validation and test splits, in that order."""

    where = "data.sources.0"  # not a field: the config path used in messages, set by check()

    @classmethod
    def from_node(cls, node: dict, where: str) -> "SourceConfig":
        return cls(**_check_keys(cls, node, where))

    def check(self, where: str) -> None:
        """Validate values and derive an empty name; `where` (data.sources.N) is kept for messages."""
        self.where = where
        for name in ("name", "kind", "format", "text_field", "split"):
            if not isinstance(getattr(self, name), str):
                raise DataError(f"{where}.{name}={getattr(self, name)!r} is invalid: must be a string")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not self.weight > 0:
            raise DataError(f"{where}.weight={self.weight!r} is invalid: must be a number > 0")
        self.weight = float(self.weight)
        self.token_budget = _count(self.token_budget, f"{where}.token_budget", optional=True)
        self.valid_documents = _count(self.valid_documents, f"{where}.valid_documents")
        self.paths = _paths(self.paths, f"{where}.paths")
        self.valid_paths = _paths(self.valid_paths, f"{where}.valid_paths")
        self.test_paths = _paths(self.test_paths, f"{where}.test_paths")
        if not (isinstance(self.hub_splits, (list, tuple)) and len(self.hub_splits) == 3
                and all(isinstance(x, str) and x for x in self.hub_splits)):
            raise DataError(f"{where}.hub_splits={self.hub_splits!r} is invalid: name the train, validation and "
                            "test splits, e.g. [train, validation, test]")
        self.hub_splits = list(self.hub_splits)
        if self.dir is not None and not (isinstance(self.dir, str) and self.dir):
            raise DataError(f"{where}.dir={self.dir!r} is invalid: a directory path, or null")
        if isinstance(self.valid_fraction, bool) or not isinstance(self.valid_fraction, (int, float)) \
                or not 0 < self.valid_fraction < 1:
            raise DataError(f"{where}.valid_fraction={self.valid_fraction!r} is invalid: must be in (0, 1)")
        if self.format not in FORMATS:
            raise DataError(f"{where}.format={self.format!r} is invalid: choose one of: {', '.join(FORMATS)}")
        if not self.name:
            self.name = (self.dataset or "").rstrip("/").split("/")[-1] or self.kind
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", self.name):
            raise DataError(f"{where}.name={self.name!r} is invalid: use letters, digits and _ . + - only")

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class DataConfig:
    name: str = "tiny_shakespeare"
    """Label of this data choice in run records."""
    sources: list[SourceConfig] = field(default_factory=lambda: [SourceConfig()])
    """The sources mixed for training; one entry for a single corpus."""
    token_budget: int | None = None
    """Training tokens prepared in all, shared by source weight; null: all of each file source (hub needs one)."""
    cache_dir: str | None = None
    """Where token shards and fitted vocabularies are kept; null: $SLM_CACHE, else ~/.cache/slm."""
    num_proc: int | None = None
    """Tokenizer workers (threads or processes); null uses every core this process may run on."""
    pack_documents: bool = False
    """Attend only within a document: slm-train sets model.embedding.document_end_id to the tokenizer's end-of-text id
    (needs tokenizer.eot=true); training windows still span document ends, attention does not cross them."""

    def check_tokenizer(self, tokenizer: TokenizerConfig) -> None:
        """Refuse settings of the two nodes that contradict each other."""
        if self.pack_documents and not tokenizer.eot:
            raise DataError("data.pack_documents=true needs tokenizer.eot=true (documents are told apart by the "
                            "end-of-text id); set tokenizer.eot=true or data.pack_documents=false")

    @classmethod
    def from_node(cls, node: dict) -> "DataConfig":
        values = _check_keys(cls, node, "data")
        raw = values.get("sources", [{}])
        if not isinstance(raw, (list, tuple)) or not raw:
            raise DataError(f"data.sources={raw!r} is invalid: must be a non-empty list of sources")
        values["sources"] = [SourceConfig.from_node(s, f"data.sources.{i}") for i, s in enumerate(raw)]
        return cls(**values)

    def __post_init__(self) -> None:
        self.token_budget = _count(self.token_budget, "data.token_budget", optional=True)
        self.num_proc = _count(self.num_proc, "data.num_proc", optional=True)
        if not isinstance(self.pack_documents, bool):
            raise DataError(f"data.pack_documents={self.pack_documents!r} is invalid: must be true or false")
        if self.cache_dir is not None and not isinstance(self.cache_dir, str):
            raise DataError(f"data.cache_dir={self.cache_dir!r} is invalid: must be a path or null")
        seen: set[str] = set()
        for i, source in enumerate(self.sources):
            source.check(f"data.sources.{i}")
            if source.name in seen:
                raise DataError(f"data.sources.{i}.name={source.name!r} is used twice; give each source a distinct name")
            seen.add(source.name)
