"""`TokenizerConfig`, `SourceConfig`, `DataConfig`: the `tokenizer` and `data` nodes of a run config, on the settings
protocol (slm.settings): limits declared with each field, cross-field rules as `require(...)`, every bad value one
SettingsError naming its full key (`data.sources.0.weight=0 is invalid: must be a number > 0`).

Each `from_node` takes the composed Hydra node as a plain dict, refuses unknown keys and settles the values, so a
typo fails before any data is read. What a source needs only when it is read (local files that exist, a hub
dataset's name and budget, a splits directory) is checked where it is built (slm.data.sources): a command that
never reads the data (slm-params with a vocabulary that needs no fitting) takes its settings as they are. The YAML
files in `conf/tokenizer/` and `conf/data/` set every field with a one-line comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import ClassVar

from slm.components.registry import Registry
from slm.settings import Settings, require, setting

SOURCES: Registry = Registry("source kind")
"""data.sources.N.kind: each source class registers itself here (slm.data.sources); the package imports them all."""
TOKENIZERS: Registry = Registry("tokenizer")
"""tokenizer.kind: each tokenizer class registers itself here (slm.data.tokenizers)."""

FORMATS = ("auto", "text", "jsonl", "parquet")


def _whole(value):
    """An integral float (2e9 from a command line) as its int; anything else as it is (the protocol checks it)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _path_list(value):
    """One path as a one-item list (a path may hold commas: a run directory's name), None as an empty list."""
    return [] if value is None else [value] if isinstance(value, str) else value


@dataclass
class TokenizerConfig(Settings):
    """The `tokenizer` node: which tokenizer, and how its vocabulary is fitted and padded."""

    kind: str = setting("char", choices=TOKENIZERS)
    """Registry key: char, word, gpt2, hf."""
    pad_vocab_multiple: int = setting(1, gt=0)
    """Round the model's vocab_size up to a multiple of this (64 turns GPT-2's 50257 into 50304)."""
    eot: bool = False
    """Separate documents with an end-of-text id: gpt2's <|endoftext|>, hf's eot_token, a new <eot> for char/word."""
    unk: bool = False
    """char/word: add <unk> for symbols outside the fitted vocabulary; without it such a symbol is an error."""
    newlines: bool = True
    """word: a newline is a token of its own; false treats it as whitespace (str.split(), as PTB and WikiText-2
    are usually read, e.g. by arXiv 2512.20877)."""
    max_vocab: int | None = setting(None, gt=0, null="keep all")
    """char/word: keep only the most frequent symbols (ties by symbol order), specials excluded; null keeps all."""
    fit_max_chars: int | None = setting(100_000_000, gt=0, null="read all")
    """char/word: characters of each source's training split read to fit the vocabulary; null reads all."""
    path: str | None = None
    """hf: a local tokenizer directory (tokenizer.json, or files AutoTokenizer reads); nothing is downloaded."""
    eot_token: str | None = None
    """hf: text of the end-of-text token; null takes the eos_token of tokenizer_config.json."""
    mask: bool = False
    """Reserve a mask token after every other id (masked diffusion): <mask> for char/word, the first spare row
    of a padded vocabulary for gpt2/hf. slm-train turns it on when the objective needs one."""

    def __post_init__(self) -> None:
        self.max_vocab, self.fit_max_chars = _whole(self.max_vocab), _whole(self.fit_max_chars)
        self.pad_vocab_multiple = _whole(self.pad_vocab_multiple)
        self.settle("tokenizer")

    @classmethod
    def from_node(cls, node, key: str = "tokenizer") -> "TokenizerConfig":
        """The config from the `tokenizer` node (a mapping); an unknown key is one line naming it."""
        return super().from_node(node, key)

    def padded(self, vocab_size: int) -> int:
        m = self.pad_vocab_multiple
        return -(-vocab_size // m) * m


@dataclass
class SourceConfig(Settings):
    """One entry of `data.sources`: a corpus, where it is read from and its share of the mix. Settled by the
    DataConfig that holds it (its key is data.sources.N)."""

    name: str = ""
    """Label in records and in cache file names, distinct within a mix; empty derives it from kind/dataset."""
    kind: str = setting("tiny_shakespeare", choices=SOURCES)
    """Registry key: tiny_shakespeare (shipped corpus), local (files), hub (Hugging Face dataset, streamed),
    splits (a corpus published as train/valid/test: a local directory, else the hub's three splits), probes (the
    synthetic probes' alphabet, docs/probes.md)."""
    weight: float = setting(1.0, gt=0)
    """Share of training samples (and validation batches) drawn from this source; normalised over the mix."""
    token_budget: int | None = setting(None, gt=0, null="its share of data.token_budget")
    """Training tokens prepared from this source; null takes weight x data.token_budget (or all for files)."""
    paths: list[str] = field(default_factory=list)
    """local: files or globs (** allowed) of the training split, or of all text when valid_paths is empty."""
    valid_paths: list[str] = field(default_factory=list)
    """local: files or globs of the validation split; empty holds out the last valid_fraction instead."""
    test_paths: list[str] = field(default_factory=list)
    """local: files or globs of the test split (scored after training with train.validation.windows); empty: none."""
    valid_fraction: float = setting(0.05, gt=0, lt=1)
    """local without valid_paths: share held out for validation, from the end: of the characters of text files,
    the records of jsonl, the rows of parquet (rounded to a whole one; a text split moves to the nearest point
    where tokenization is exact, within a quarter of the held-out part)."""
    format: str = setting("auto", choices=FORMATS)
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
    valid_documents: int = setting(1000, gt=0)
    """hub: documents at the start of the stream held out for validation; training streams the rest."""
    dir: str | None = None
    """splits: a local directory holding train.txt, valid.txt and test.txt; null reads the hub's splits instead."""
    hub_splits: list[str] = field(default_factory=lambda: ["train", "validation", "test"])
    """splits: the hub's names of the train, validation and test splits, in that order."""

    where = "data.sources.0"  # not a field: the config path used in messages, set by check()

    def __post_init__(self) -> None:
        self.token_budget, self.valid_documents = _whole(self.token_budget), _whole(self.valid_documents)
        self.paths, self.valid_paths = _path_list(self.paths), _path_list(self.valid_paths)
        self.test_paths = _path_list(self.test_paths)

    def derive(self, root) -> None:
        self.weight = float(self.weight)
        if not self.name:
            self.name = (self.dataset or "").rstrip("/").split("/")[-1] or self.kind

    def check(self, key: str, root) -> None:
        self.where = key  # kept for the messages of the source when it is built
        splits = self.hub_splits
        require((len(splits) == 3 and all(splits), f"{key}.hub_splits", splits,
                 "name the train, validation and test splits, e.g. [train, validation, test]"),
                (self.dir is None or bool(self.dir), f"{key}.dir", self.dir, "a directory path, or null"),
                (re.fullmatch(r"[A-Za-z0-9_.+-]+", self.name) is not None, f"{key}.name", self.name,
                 "use letters, digits and _ . + - only"))

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class RecordsSettings(Settings):
    """`data.records`: the post-training records a run trains on instead of token windows (train.objective sft or
    preference)."""

    optional: ClassVar[bool] = True

    train: str = ""
    """The training records, a JSONL file: prompt/completion for train.objective=sft, prompt/chosen/rejected for
    train.objective=preference (TRL's formats)."""
    valid: str | None = None
    """Held-out records of the same kind, validated on; null: valid_fraction of the training file's records, the same
    ones for every run."""
    valid_fraction: float = setting(0.1, gt=0, lt=1)
    """The share of the training file held out for validation when `valid` is null (at least one record)."""

    def check(self, key: str, root) -> None:
        require((bool(self.train.strip()), f"{key}.train", self.train, "a JSONL file of records"),
                (self.valid is None or bool(self.valid.strip()), f"{key}.valid", self.valid,
                 "a JSONL file of records, or null"))


@dataclass
class DataConfig(Settings):
    """The `data` node: the sources mixed for training and where their token shards are kept."""

    name: str = "tiny_shakespeare"
    """Label of this data choice in run records."""
    sources: list[SourceConfig] = field(default_factory=lambda: [SourceConfig()])
    """The sources mixed for training; one entry for a single corpus."""
    token_budget: int | None = setting(None, gt=0, null="all of each file source")
    """Training tokens prepared in all, shared by source weight; null: all of each file source (hub needs one)."""
    cache_dir: str | None = None
    """Where token shards and fitted vocabularies are kept; null: $SLM_CACHE, else ~/.cache/slm."""
    num_proc: int | None = setting(None, gt=0, null="every core")
    """Tokenizer workers (threads or processes); null uses every core this process may run on."""
    records: RecordsSettings | None = None
    """Post-training records trained on instead of token windows (train.objective sft or preference),
    data.records.<field>: train, valid, valid_fraction; the sources then only fit the tokenizer. null: windows."""
    pack_documents: bool = False
    """Attend only within a document: slm-train sets model.embedding.document_end_id to the tokenizer's end-of-text id
    (needs tokenizer.eot=true); training windows still span document ends, attention does not cross them."""

    def __post_init__(self) -> None:
        self.token_budget, self.num_proc = _whole(self.token_budget), _whole(self.num_proc)
        self.settle("data")

    @classmethod
    def from_node(cls, node, key: str = "data") -> "DataConfig":
        """The config from the `data` node (a mapping); an unknown key is one line naming it."""
        return super().from_node(node, key)

    def adopt_groups(self, key: str) -> None:
        """Each entry of `sources` (a mapping, from YAML) made into its SourceConfig."""
        super().adopt_groups(key)
        raw = self.sources
        require((isinstance(raw, (list, tuple)) and len(raw) > 0, f"{key}.sources", raw,
                 "must be a non-empty list of sources"))
        self.sources = [SourceConfig.from_node(s, f"{key}.sources.{i}") for i, s in enumerate(raw)]
        for i, source in enumerate(self.sources):
            source.adopt_groups(f"{key}.sources.{i}")

    def groups(self) -> list[tuple[str, Settings]]:
        """The nested groups, with each source as `sources.N`."""
        return super().groups() + [(f"sources.{i}", s) for i, s in enumerate(self.sources)]

    def check(self, key: str, root) -> None:
        names = [s.name for s in self.sources]
        for i, name in enumerate(names):
            require((name not in names[:i], f"{key}.sources.{i}.name", name,
                     "used by an earlier source; give each source a distinct name"))

    def check_tokenizer(self, tokenizer: TokenizerConfig) -> None:
        """Refuse settings of the two nodes that contradict each other."""
        require((not self.pack_documents or tokenizer.eot, "data.pack_documents", self.pack_documents,
                 "needs tokenizer.eot=true (documents are told apart by the end-of-text id); set tokenizer.eot=true "
                 "or data.pack_documents=false"))
