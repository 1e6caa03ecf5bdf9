"""Tokenizers (a registry): char, word, gpt2, hf.

Every tokenizer has `name`, `vocab_size` (unpadded), `eot_id` (int or None), `encode`, `decode`,
`encode_batch` (numpy arrays, used to build shards) and `save(directory)`; `load_tokenizer(directory)`
reads the saved files back into an identical tokenizer.

char and word fit their vocabulary on the training split (`fit_counts` + `from_counts`; `slm.data.prepare`
caches the result so every job of a sweep gets the same ids). Their ids: the symbols first (char: by code
point, so Tiny Shakespeare's 65 characters get the usual ids 0..64; word: by frequency), then `<unk>` when
`unk` is on, then `<eot>` when `eot` is on. Both are off for char by default: Tiny Shakespeare is one
document per split and its validation and test characters all occur in training, so the vocabulary stays
the standard 65 symbols; turn `eot` on for sources with many documents.

A masked-diffusion objective needs a mask token: `reserve_mask()` (tokenizer.mask) adds one id after every
other id — `<mask>` for char/word, the first row past GPT-2's 50257 (a spare row once the vocabulary is
padded to 50304) — and decodes it as `<mask>`. It changes no other id, so the shards are shared with the
same data tokenized without it (the fingerprint leaves it out).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
import shutil
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import ClassVar, Iterable

import numpy as np

from slm.components.registry import UnknownKeyError
from slm.data.config import TOKENIZERS, TokenizerConfig
from slm.data.errors import DataError

META_FILE = "slm_tokenizer.json"
HF_SUBDIR = "hf_tokenizer"
GPT2_RANKS = "tokenizers_assets/gpt2.tiktoken"
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_EOT = 50256
UNK, EOT, MASK = "<unk>", "<eot>", "<mask>"


class Tokenizer:
    """Base class; subclasses set `name`, `vocab_size`, `eot_id` and implement the encoders."""

    kind: ClassVar[str] = ""
    fitted: ClassVar[bool] = False
    """The vocabulary is fitted on training text (char, word)."""
    threads: bool = True
    """encode_batch releases the GIL, so threads use every core; False: worker processes."""

    name: str
    vocab_size: int
    eot_id: int | None
    mask_id: int | None = None
    """The mask token of masked diffusion (reserve_mask), after every other id; None: none."""

    def reserve_mask(self) -> "Tokenizer":
        """Add the mask token as a new last id (no-op if there is one)."""
        if self.mask_id is None:
            self.mask_id = self.vocab_size
            self.vocab_size += 1
        return self

    def _decode_masked(self, ids: Iterable[int], decode) -> str:
        """decode(ids) with the mask id written as <mask> (the underlying decoder does not know it)."""
        ids = list(ids)
        if self.mask_id is None or self.mask_id not in ids:
            return decode(ids)
        parts, run = [], []
        for i in ids:
            if i == self.mask_id:
                parts += [decode(run), MASK]
                run = []
            else:
                run.append(i)
        return "".join(parts + [decode(run)])

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0].tolist()

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    def meta(self) -> dict:
        """What `save` writes to META_FILE: enough to rebuild this tokenizer."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """Hash of everything that decides the ids (a part of every shard's cache key); the name is not."""
        ids = {k: v for k, v in self.meta().items() if k != "name"}
        return hashlib.sha256(json.dumps(ids, sort_keys=True).encode()).hexdigest()

    def save(self, directory: str | os.PathLike) -> Path:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / (META_FILE + f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps({**self.meta(), "mask": self.mask_id is not None}, ensure_ascii=False) + "\n")
        os.replace(tmp, out / META_FILE)
        return out

    @classmethod
    def from_config(cls, cfg: TokenizerConfig, counts: Counter | None = None) -> "Tokenizer":
        raise NotImplementedError

    @classmethod
    def from_meta(cls, meta: dict, directory: Path) -> "Tokenizer":
        raise NotImplementedError




def tokenizer_class(kind: str) -> type[Tokenizer]:
    try:
        return TOKENIZERS.get(kind)
    except UnknownKeyError as err:
        raise DataError(str(err)) from None


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """Read back what `Tokenizer.save(directory)` wrote."""
    path = Path(directory) / META_FILE
    if not path.is_file():
        raise DataError(f"no {META_FILE} in {directory}: not a saved slm tokenizer directory")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:  # not UTF-8, not JSON
        raise DataError(_unreadable(path, err).replace("(UTF-8 JSON)", "(save the tokenizer again)")) from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: expected a JSON object with the tokenizer's kind; save the tokenizer again")
    tokenizer = tokenizer_class(meta.get("kind")).from_meta(meta, Path(directory))
    return tokenizer.reserve_mask() if meta.get("mask") else tokenizer


# ---------------------------------------------------------------- fitted vocabularies (char, word)
class _VocabTokenizer(Tokenizer):
    """Ids: `symbols`, then <unk> (if unk), then <eot> (if eot)."""

    fitted = True

    def __init__(self, symbols: list[str], unk: bool, eot: bool):
        if not symbols:
            raise DataError(f"{self.kind} tokenizer: the training split has no text to fit a vocabulary on")
        self.name = self.kind
        self.symbols = list(symbols)
        self.unk_id = len(self.symbols) if unk else None
        self.eot_id = len(self.symbols) + int(unk) if eot else None
        self.vocab_size = len(self.symbols) + int(unk) + int(eot)
        self._strings = self.symbols + ([UNK] if unk else []) + ([EOT] if eot else [])

    @staticmethod
    def fit_counts(texts: Iterable[str]) -> Counter:
        raise NotImplementedError

    @classmethod
    def select(cls, counts: Counter, max_vocab: int | None) -> list[str]:
        """The kept symbols in id order."""
        raise NotImplementedError

    @classmethod
    def from_config(cls, cfg: TokenizerConfig, counts: Counter | None = None) -> "Tokenizer":
        kept = cls.select(counts or Counter(), cfg.max_vocab)
        if len(kept) < len(counts or ()) and not cfg.unk:
            raise DataError(f"tokenizer.max_vocab={cfg.max_vocab} drops {len(counts) - len(kept)} symbols; "
                            "set tokenizer.unk=true so they map to <unk>")
        return cls._build(kept, cfg)

    @classmethod
    def _build(cls, kept: list[str], cfg: TokenizerConfig) -> "Tokenizer":
        return cls(kept, unk=cfg.unk, eot=cfg.eot)

    @classmethod
    def from_meta(cls, meta: dict, directory: Path) -> "Tokenizer":
        return cls(meta["symbols"], unk=meta["unk"], eot=meta["eot"])

    def meta(self) -> dict:
        return {"kind": self.kind, "symbols": self.symbols, "unk": self.unk_id is not None, "eot": self.eot_id is not None}

    def _unknown(self, symbol: str) -> DataError:
        return DataError(f"{self.kind} tokenizer: {symbol!r} is not in the vocabulary fitted on the training split; "
                         "set tokenizer.unk=true to map unseen symbols to <unk>")


@TOKENIZERS.register("char")
class CharTokenizer(_VocabTokenizer):
    """One id per Unicode character; encoding is vectorised over code points."""

    kind = "char"

    def __init__(self, symbols: list[str], unk: bool, eot: bool):
        super().__init__(symbols, unk, eot)
        points = np.array([ord(c) for c in self.symbols], dtype=np.int64)
        self._order = np.argsort(points)
        self._points = points[self._order]  # sorted code points; self._order maps them back to ids

    @staticmethod
    def fit_counts(texts: Iterable[str]) -> Counter:
        counts: Counter = Counter()
        for text in texts:
            counts.update(text)
        return counts

    @classmethod
    def select(cls, counts: Counter, max_vocab: int | None) -> list[str]:
        kept = sorted(counts, key=lambda c: (-counts[c], c))[:max_vocab] if max_vocab else list(counts)
        return sorted(kept)

    def _encode_one(self, text: str) -> np.ndarray:
        points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int64)
        pos = np.minimum(np.searchsorted(self._points, points), len(self._points) - 1)
        ids = self._order[pos]
        missing = self._points[pos] != points
        if missing.any():
            if self.unk_id is None:
                raise self._unknown(chr(points[np.argmax(missing)]))
            ids[missing] = self.unk_id
        return ids

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self._encode_one(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(MASK if i == self.mask_id else self._strings[i] for i in ids)


@TOKENIZERS.register("word")
class WordTokenizer(_VocabTokenizer):
    """Whitespace-separated words; by default a newline is a token of its own so line structure survives
    (`newlines=False`: a newline is whitespace like any other, as str.split() reads PTB and WikiText-2).

    decode joins words with one space (other whitespace is not kept)."""

    kind = "word"
    threads = False
    pattern = re.compile(r"\S+|\n")
    words_only = re.compile(r"\S+")

    def __init__(self, symbols: list[str], unk: bool, eot: bool, newlines: bool = True):
        super().__init__(symbols, unk, eot)
        self.newlines = newlines
        self._pattern = self.pattern if newlines else self.words_only
        self._ids = {s: i for i, s in enumerate(self.symbols)}

    @classmethod
    def fit_counts(cls, texts: Iterable[str]) -> Counter:
        counts: Counter = Counter()
        for text in texts:
            counts.update(cls.pattern.findall(text))
        return counts

    @classmethod
    def select(cls, counts: Counter, max_vocab: int | None) -> list[str]:
        return sorted(counts, key=lambda w: (-counts[w], w))[:max_vocab]

    @classmethod
    def from_config(cls, cfg: TokenizerConfig, counts: Counter | None = None) -> "Tokenizer":
        if not cfg.newlines and counts:
            counts = Counter({w: n for w, n in counts.items() if w != "\n"})
        return super().from_config(cfg, counts)

    @classmethod
    def _build(cls, kept: list[str], cfg: TokenizerConfig) -> "Tokenizer":
        return cls(kept, unk=cfg.unk, eot=cfg.eot, newlines=cfg.newlines)

    @classmethod
    def from_meta(cls, meta: dict, directory: Path) -> "Tokenizer":
        return cls(meta["symbols"], unk=meta["unk"], eot=meta["eot"], newlines=meta.get("newlines", True))

    def meta(self) -> dict:
        # "newlines" only when off, so the ids (and cached shards) of newline-token vocabularies keep their key
        return {**super().meta(), **({} if self.newlines else {"newlines": False})}

    def _encode_one(self, text: str) -> np.ndarray:
        words = self._pattern.findall(text)
        get, unk = self._ids.get, -1 if self.unk_id is None else self.unk_id
        ids = np.fromiter((get(w, unk) for w in words), dtype=np.int64, count=len(words))
        if unk < 0 and (ids < 0).any():
            raise self._unknown(words[int(np.argmax(ids < 0))])
        return ids

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self._encode_one(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        out: list[str] = []
        for i in ids:
            word = MASK if i == self.mask_id else self._strings[i]
            if out and word != "\n" and out[-1] != "\n":
                out.append(" ")
            out.append(word)
        return "".join(out)


# ---------------------------------------------------------------- gpt2 (tiktoken, shipped ranks)
@functools.lru_cache(maxsize=1)
def gpt2_encoding():
    """tiktoken's r50k ("gpt2") Encoding from the ranks file shipped in this package (never downloaded).

    The file is parsed exactly as tiktoken.load.load_tiktoken_bpe does, without its temp-dir copy."""
    import tiktoken
    import tiktoken_ext.openai_public as openai_public

    data = resources.files("slm.data").joinpath(GPT2_RANKS).read_bytes()
    if hashlib.sha256(data).hexdigest() != GPT2_RANKS_SHA256:
        raise DataError(f"slm/data/{GPT2_RANKS} is corrupt: sha256 differs from {GPT2_RANKS_SHA256}")
    ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in data.splitlines() if line)}
    return tiktoken.Encoding(name="gpt2", pat_str=openai_public.r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": GPT2_EOT}, explicit_n_vocab=GPT2_EOT + 1)


@TOKENIZERS.register("gpt2")
class GPT2Tokenizer(Tokenizer):
    """GPT-2 BPE (50257 ids). Text is encoded as ordinary text: a literal "<|endoftext|>" in a document
    is not the special id; the eot id 50256 is only inserted between documents."""

    kind = "gpt2"

    def __init__(self, eot: bool = True):
        self.name = "gpt2"
        self.enc = gpt2_encoding()
        self.vocab_size = self.enc.n_vocab
        self.eot_id = GPT2_EOT if eot else None

    @classmethod
    def from_config(cls, cfg: TokenizerConfig, counts: Counter | None = None) -> "Tokenizer":
        return cls(eot=cfg.eot)

    @classmethod
    def from_meta(cls, meta: dict, directory: Path) -> "Tokenizer":
        if meta.get("ranks_sha256") != GPT2_RANKS_SHA256:
            raise DataError(f"{directory}/{META_FILE}: gpt2 ranks sha256 {meta.get('ranks_sha256')!r} differs from "
                            f"the shipped {GPT2_RANKS_SHA256}")
        return cls(eot=meta["eot"])

    def meta(self) -> dict:
        return {"kind": "gpt2", "ranks_sha256": GPT2_RANKS_SHA256, "eot": self.eot_id is not None}

    def encode(self, text: str) -> list[int]:
        return self.enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        if hasattr(self.enc, "encode_to_numpy"):  # tiktoken >= 0.8: no Python list; same ids as encode_ordinary
            return [self.enc.encode_to_numpy(t, allowed_special=set(), disallowed_special=()) for t in texts]
        return [np.asarray(self.enc.encode_ordinary(t), dtype=np.int64) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return self._decode_masked(ids, self.enc.decode)


# ---------------------------------------------------------------- hf (a local tokenizer directory)
HF_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
            "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")


VOCABULARY_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("vocab.txt",), ("tokenizer.model",),
                    ("spiece.model",), ("sentencepiece.bpe.model",))
"""The files that hold a Hugging Face tokenizer's vocabulary: a directory needs one of these sets whole."""


def _check_vocabulary_files(path: Path, files: list[str]) -> None:
    """DataError naming the directory and the missing files when no vocabulary set is whole."""
    if any(all(f in files for f in group) for group in VOCABULARY_FILES):
        return
    partial = [group for group in VOCABULARY_FILES if any(f in files for f in group)]
    if partial:
        lacks = ", ".join(f for f in partial[0] if f not in files)
    else:
        lacks = "its vocabulary: one of " + ", ".join(" + ".join(group) for group in VOCABULARY_FILES)
    raise DataError(f"tokenizer directory {path} is incomplete: it has {', '.join(files)} but lacks {lacks}; copy the "
                    "missing files from where the tokenizer was saved (save_pretrained writes them all)")


def _unreadable(path: Path, err: BaseException) -> str:
    reason = " ".join(str(err).split())[:200] or type(err).__name__
    return (f"{path}: cannot be read as a tokenizer ({type(err).__name__}: {reason}); replace it with the file "
            "save_pretrained wrote (UTF-8 JSON)")


@TOKENIZERS.register("hf")
class HFTokenizer(Tokenizer):
    """A local Hugging Face tokenizer: tokenizer.json through `tokenizers`, else transformers' AutoTokenizer
    (local_files_only). No special tokens (BOS, ...) are added; eot goes between documents."""

    kind = "hf"

    def __init__(self, path: str | os.PathLike, eot: bool, eot_token: str | None = None, name: str | None = None):
        self.path = Path(path).expanduser()
        if not self.path.is_dir():
            raise DataError(f"tokenizer.path={str(path)!r} is not a directory; point it at a local tokenizer directory")
        self.files = sorted(f for f in HF_FILES if (self.path / f).is_file())
        if not self.files:
            raise DataError(f"tokenizer.path={str(path)!r} holds no tokenizer files; expected one of: {', '.join(HF_FILES)}")
        self.name = name or f"hf:{self.path.name}"
        _check_vocabulary_files(self.path, self.files)
        for f in self.files:  # the small JSON files transformers reads: a bad one named here, not inside it
            if f.endswith(".json") and f != "tokenizer.json":
                try:
                    json.loads((self.path / f).read_text(encoding="utf-8"))
                except (ValueError, OSError) as err:
                    raise DataError(_unreadable(self.path / f, err)) from None
        self.hashes = {f: hashlib.sha256((self.path / f).read_bytes()).hexdigest() for f in self.files}
        if "tokenizer.json" in self.files:
            from tokenizers import Tokenizer as RustTokenizer

            try:
                self._rust = RustTokenizer.from_file(str(self.path / "tokenizer.json"))
            except Exception as err:  # noqa: BLE001 - tokenizers raises a bare Exception for any bad file
                raise DataError(_unreadable(self.path / "tokenizer.json", err)) from None
            self.vocab_size = self._rust.get_vocab_size(with_added_tokens=True)
            token_to_id = self._rust.token_to_id
        else:
            from transformers import AutoTokenizer

            self._rust = None
            try:
                self._auto = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
            except Exception as err:  # noqa: BLE001 - transformers raises many kinds for a bad directory
                raise DataError(_unreadable(self.path, err)) from None
            self.vocab_size = len(self._auto)
            token_to_id = self._auto.convert_tokens_to_ids
            self.threads = False  # Python tokenizers hold the GIL
        self.eot_token = eot_token if eot_token is not None else self._config_eos()
        self.eot_id = None
        if eot:
            if self.eot_token is None:
                raise DataError(f"tokenizer.eot=true but the tokenizer at {self.path} names no eos_token; "
                                "set tokenizer.eot_token=... or tokenizer.eot=false")
            self.eot_id = token_to_id(self.eot_token)
            if self.eot_id is None or (self._rust is None and self.eot_id == self._auto.unk_token_id):
                raise DataError(f"tokenizer.eot_token={self.eot_token!r} is not a token of {self.path}")

    def _config_eos(self) -> str | None:
        config = self.path / "tokenizer_config.json"
        if not config.is_file():
            return None
        try:
            node = json.loads(config.read_text(encoding="utf-8"))
        except (ValueError, OSError) as err:  # not UTF-8, not JSON
            raise DataError(_unreadable(config, err)) from None
        eos = node.get("eos_token") if isinstance(node, dict) else None
        return eos.get("content") if isinstance(eos, dict) else eos

    @classmethod
    def from_config(cls, cfg: TokenizerConfig, counts: Counter | None = None) -> "Tokenizer":
        if not cfg.path:  # conf/tokenizer/hf.yaml leaves it null: the directory is the user's to name
            raise DataError("tokenizer.path is not set: the hf tokenizer needs a local directory, e.g. tokenizer.path=/models/my_tok")
        return cls(cfg.path, eot=cfg.eot, eot_token=cfg.eot_token)

    @classmethod
    def from_meta(cls, meta: dict, directory: Path) -> "Tokenizer":
        files = directory / HF_SUBDIR
        missing = sorted(f for f in meta.get("files") or {} if not (files / f).is_file())
        if missing:
            raise DataError(f"tokenizer directory {directory} is incomplete: {files} lacks {', '.join(missing)} "
                            f"(named in {META_FILE}); restore them, or save the tokenizer again")
        return cls(files, eot=meta["eot"], eot_token=meta["eot_token"], name=meta.get("name"))

    def meta(self) -> dict:
        return {"kind": "hf", "name": self.name, "files": self.hashes, "eot": self.eot_id is not None, "eot_token": self.eot_token}

    def save(self, directory: str | os.PathLike) -> Path:
        out = Path(directory) / HF_SUBDIR
        out.mkdir(parents=True, exist_ok=True)
        for f in self.files:
            if (self.path / f).resolve() != (out / f).resolve():
                shutil.copyfile(self.path / f, out / (f + ".tmp"))
                os.replace(out / (f + ".tmp"), out / f)
        return super().save(directory)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        if self._rust is not None:
            return [np.asarray(e.ids, dtype=np.int64) for e in self._rust.encode_batch(texts, add_special_tokens=False)]
        return [np.asarray(ids, dtype=np.int64) for ids in self._auto(texts, add_special_tokens=False)["input_ids"]]

    def decode(self, ids: Iterable[int]) -> str:
        if self._rust is not None:
            return self._decode_masked(ids, lambda run: self._rust.decode(run, skip_special_tokens=False))
        return self._decode_masked(ids, self._auto.decode)
