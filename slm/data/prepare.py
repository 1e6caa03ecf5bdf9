"""`prepare(data_node, tokenizer_node)`: build the tokenizer and every source's train/valid (and test) shards.

Everything lands in the cache (see `slm.data.cache`), keyed by source, split, tokenizer and content, so a
second job of a sweep finds it there. A char/word vocabulary is fitted on the training splits once and
stored under a key of the training content, so every job gets identical ids.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import slm.data.cache as cache
from slm.data.config import DataConfig, TokenizerConfig
from slm.data.errors import DataError
from slm.data.shards import Shard, build_shard, damaged_meta, read_meta, shard_dtype
from slm.data.sources import Source, Stream, build_source
from slm.data.tokenizers import Tokenizer, tokenizer_class


SPLIT_LABELS = {"train": "training", "valid": "validation", "test": "test"}


def _hash(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class PreparedSource:
    """One source, tokenized."""

    name: str
    """The source's name (distinct within the mix)."""
    weight: float
    """Share of training samples, normalised over the mix."""
    source: Source
    """The source object (its config is `source.cfg`)."""
    train: Shard
    """Training tokens."""
    valid: Shard
    """Validation tokens."""
    test: Shard | None = None
    """Test tokens, where the source has a test split."""
    origins: dict[str, str] = field(default_factory=dict)
    """Where each split's text comes from (Stream.origin), for messages."""

    def origin(self, split: str) -> str:
        """Where a split's text comes from, as "validation text: <files>" (split: train, valid, test); "" if unknown."""
        where = self.origins.get(split)
        return f"{SPLIT_LABELS[split]} text: {where}" if where else ""

    def describe(self) -> dict:
        shards = {"train": self.train, "valid": self.valid, **({"test": self.test} if self.test else {})}
        return {**self.source.describe(), "weight": self.weight, "token_budget": self.source.budget,
                **{f"{split}_tokens": shard.n_tokens for split, shard in shards.items()},
                "cache_keys": {split: shard.key for split, shard in shards.items()},
                "reused_cache": {split: not shard.built for split, shard in shards.items()}}


@dataclass
class PreparedData:
    """The result of `prepare`: what the DataModule and the model config need."""

    tokenizer: Tokenizer
    """The tokenizer the shards were made with."""
    vocab_size: int
    """tokenizer.vocab_size padded up to tokenizer.pad_vocab_multiple: the model's vocab_size."""
    sources: list[PreparedSource]
    """Sources in config order."""
    config: DataConfig
    """The parsed data node."""
    tokenizer_config: TokenizerConfig
    """The parsed tokenizer node."""
    cache_dir: Path
    """The cache directory used."""

    def check_first_windows(self, n_windows: int, context_length: int) -> None:
        """Raise DataError unless every source's validation and test splits hold its share of the first
        `n_windows` windows of context_length + 1 tokens (train.validation.windows)."""
        from slm.data.mix import shares

        for s, n in zip(self.sources, shares([s.weight for s in self.sources], n_windows)):
            if s.test is None:
                raise DataError(f"train.validation.windows={n_windows}: source {s.name!r} has no test split (give its "
                                f"files: data.sources.N.test_paths), or set train.validation.windows=null")
            for split, shard in (("valid", s.valid), ("test", s.test)):
                if shard.n_tokens - context_length < n:
                    origin = f" ({s.origin(split)})" if s.origin(split) else ""
                    raise DataError(f"train.validation.windows={n_windows}: source {s.name!r} has {shard.n_tokens} "
                                    f"{SPLIT_LABELS[split]} tokens, fewer than its {n} windows of "
                                    f"{context_length + 1} need{origin}")

    def bytes_per_token(self, split: str, limit: int = 1 << 20) -> float | None:
        """UTF-8 bytes of text per token of a split ("valid" or "test"), over the mix: the sources' ratios
        (decoded text of up to `limit` tokens from each split's start) weighted by their share of the scored
        windows, so that bits per byte = NLL / ln 2 / this. None when a source lacks the split or it is empty.
        The end-of-text (and mask) ids count as tokens but not as text: their "<eot>" is no byte of the documents.
        Exact for byte-level BPE and characters; for a word tokenizer the decoded text's whitespace is its own."""
        ratios, weights = [], []
        for s in self.sources:
            shard = s.valid if split == "valid" else s.test
            if shard is None or shard.n_tokens == 0:
                return None
            ids = shard.tokens()[:limit]
            markers = [i for i in (self.tokenizer.eot_id, self.tokenizer.mask_id) if i is not None]
            text = ids[~np.isin(ids, markers)] if markers else ids
            ratios.append(len(self.tokenizer.decode(text.tolist()).encode("utf-8")) / len(ids))
            weights.append(s.weight)
        return sum(r * w for r, w in zip(ratios, weights)) / sum(weights) if ratios else None

    def describe(self) -> dict:
        """JSON-able summary for the run record."""
        t = self.tokenizer
        return {"name": self.config.name,
                "tokenizer": {"name": t.name, "kind": t.kind, "vocab_size": t.vocab_size,
                              "padded_vocab_size": self.vocab_size, "eot_id": t.eot_id, "mask_id": t.mask_id,
                              "fingerprint": t.fingerprint()[:16]},
                "sources": [s.describe() for s in self.sources],
                "token_budget": self.config.token_budget,
                "cache_dir": str(self.cache_dir)}


def prepare(data_node: dict, tokenizer_node: dict) -> PreparedData:
    """Parse the `data` and `tokenizer` nodes, build the tokenizer, tokenize (or reuse) every shard. Progress
    bars (ours, and those of a hub download) are plain lines when stderr is not a terminal."""
    from slm.plain_progress import plain_stderr

    with plain_stderr():
        return _prepare(data_node, tokenizer_node)


def _prepare(data_node: dict, tokenizer_node: dict) -> PreparedData:
    cfg = DataConfig.from_node(_plain(data_node))
    tok_cfg = TokenizerConfig.from_node(_plain(tokenizer_node))
    cfg.check_tokenizer(tok_cfg)
    root = cache.cache_root(cfg.cache_dir)
    total_weight = sum(s.weight for s in cfg.sources)
    sources = []
    for s in cfg.sources:
        budget = s.token_budget
        if budget is None and cfg.token_budget is not None:
            budget = max(1, int(cfg.token_budget * s.weight / total_weight))
        sources.append(build_source(s, budget))
    streams = [src.streams() for src in sources]
    tokenizer = build_tokenizer(tok_cfg, [st["train"] for st in streams], root)
    dtype = shard_dtype(tokenizer.vocab_size)
    prepared = []
    for src, st in zip(sources, streams):
        shards = {split: build_shard(root, shard_key(stream, tokenizer, dtype), stream, tokenizer, dtype, cfg.num_proc)
                  for split, stream in st.items()}
        prepared.append(PreparedSource(src.cfg.name, src.cfg.weight / total_weight, src, shards["train"], shards["valid"],
                                       shards.get("test"), {split: stream.origin for split, stream in st.items()}))
    return PreparedData(tokenizer, tok_cfg.padded(tokenizer.vocab_size), prepared, cfg, tok_cfg, root)


def _plain(node):
    """A composed OmegaConf node as plain containers (plain dicts pass through)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def shard_key(stream: Stream, tokenizer: Tokenizer, dtype: np.dtype) -> str:
    """<source>.<split>.<tokenizer>.<hash of content, tokenizer, cap, dtype>."""
    material = {"stream": stream.key, "tokenizer": tokenizer.fingerprint(), "max_tokens": stream.max_tokens,
                "dtype": dtype.str, "version": 1}
    return f"{stream.source}.{stream.split}.{tokenizer.kind}.{_hash(material)}"


def build_tokenizer(cfg: TokenizerConfig, train_streams: list[Stream], root: Path) -> Tokenizer:
    """The configured tokenizer; char/word fit (or reuse from the cache) their vocabulary on the training streams."""
    tokenizer = _build_tokenizer(cfg, train_streams, root)
    return tokenizer.reserve_mask() if cfg.mask else tokenizer


def _build_tokenizer(cfg: TokenizerConfig, train_streams: list[Stream], root: Path) -> Tokenizer:
    cls = tokenizer_class(cfg.kind)
    if not cls.fitted:
        return cls.from_config(cfg)
    material = {"kind": cfg.kind, "max_vocab": cfg.max_vocab, "unk": cfg.unk, "eot": cfg.eot,
                "fit_max_chars": cfg.fit_max_chars, "train": [s.key for s in train_streams],
                **({} if cfg.newlines else {"newlines": False})}
    key = f"{cfg.kind}.{_hash(material)}"
    path = cache.entry(root, "vocab", f"{key}.json")
    meta = read_meta(path)
    if meta is None:
        with cache.locked(root, f"vocab.{key}", f"fitting the {cfg.kind} vocabulary"):
            meta = read_meta(path)
            if meta is None:
                tokenizer = cls.from_config(cfg, cls.fit_counts(_fit_texts(cfg, train_streams)))
                meta = tokenizer.meta()
                cache.write_json(path, meta)
                return tokenizer
    try:
        return cls.from_meta(meta, path.parent)
    except DataError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:  # fields missing or of the wrong kind
        raise damaged_meta(path, f"{type(err).__name__}: {' '.join(str(err).split())[:120]}") from None


def _fit_texts(cfg: TokenizerConfig, streams: list[Stream]):
    """Training text of each stream, at most fit_max_chars characters of each."""
    for stream in streams:
        if stream.remote and cfg.fit_max_chars is None:
            raise DataError(f"tokenizer.fit_max_chars=null would read all of the hub source {stream.source!r}; "
                            "set a number of characters")
        left = cfg.fit_max_chars
        pieces = stream.pieces()
        try:
            for text, _ in pieces:
                if left is not None:
                    text, left = text[:left], left - len(text)
                yield text
                if left is not None and left <= 0:
                    break
        finally:
            pieces.close()
