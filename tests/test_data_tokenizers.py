"""Tokenizers: GPT-2 ids, char/word vocabularies fitted on the training split, a local hf tokenizer,
save/load round trips, vocabulary padding, and exact tokenization of text read in pieces."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from slm.data import DataError, load_tokenizer, prepare, readers
from slm.data.tokenizers import GPT2_RANKS_SHA256, gpt2_encoding
from slm.settings import SettingsError

DATA = Path(__file__).parent / "data"
WIKITEXT = DATA / "wikitext2_valid_excerpt.txt"
SHAKESPEARE_TRAIN = resources.files("slm.data").joinpath("corpora/tiny_shakespeare/train.txt").read_text()


def _prepare(tmp_path, tokenizer: dict, data: dict | None = None):
    return prepare({"cache_dir": str(tmp_path / "cache"), **(data or {})}, tokenizer)


def _same(a, b, text: str) -> None:
    assert (a.name, a.vocab_size, a.eot_id, a.fingerprint()) == (b.name, b.vocab_size, b.eot_id, b.fingerprint())
    assert a.encode(text) == b.encode(text)
    assert a.decode(a.encode(text)) == b.decode(b.encode(text))


# ---------------------------------------------------------------- gpt2
def test_gpt2_known_ids(tmp_path):
    tok = _prepare(tmp_path, {"kind": "gpt2", "eot": True}).tokenizer
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.encode("The quick brown fox jumps over the lazy dog.") == [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13]
    assert (tok.vocab_size, tok.eot_id) == (50257, 50256)
    assert tok.encode("<|endoftext|>") != [50256]  # document text is ordinary text
    text = WIKITEXT.read_text()
    assert tok.decode(tok.encode(text)) == text


def test_gpt2_ranks_shipped_intact():
    import hashlib

    data = resources.files("slm.data").joinpath("tokenizers_assets/gpt2.tiktoken").read_bytes()
    assert hashlib.sha256(data).hexdigest() == GPT2_RANKS_SHA256
    assert gpt2_encoding().n_vocab == 50257


def test_gpt2_vocab_padding(tmp_path):
    assert _prepare(tmp_path, {"kind": "gpt2", "pad_vocab_multiple": 64}).vocab_size == 50304
    assert _prepare(tmp_path, {"kind": "gpt2"}).vocab_size == 50257


@pytest.mark.parametrize("piece_bytes", [64, 2048])
@pytest.mark.parametrize("path", [WIKITEXT, Path(str(resources.files("slm.data").joinpath("corpora/tiny_shakespeare/train.txt")))])
def test_pieces_tokenize_like_the_whole_file(monkeypatch, path, piece_bytes):
    monkeypatch.setattr(readers, "PIECE_BYTES", piece_bytes)
    enc = gpt2_encoding()
    text = path.read_text()
    pieces = [t for t, _ in readers.read(path, "text", "text")]
    assert len(pieces) > 10 and "".join(pieces) == text
    assert [i for t in pieces for i in enc.encode_ordinary(t)] == enc.encode_ordinary(text)


def test_gpt2_shard_equals_tiktoken_on_wikitext(tmp_path, monkeypatch):
    from slm.data import shards

    monkeypatch.setattr(readers, "PIECE_BYTES", 1024)
    monkeypatch.setattr(shards, "CHUNK_CHARS", 4096)  # many chunks, encoded by several threads
    p = _prepare(tmp_path, {"kind": "gpt2", "eot": True},
                 {"num_proc": 4, "sources": [{"kind": "local", "paths": [str(WIKITEXT)], "valid_paths": [str(WIKITEXT)]}]})
    ref = gpt2_encoding().encode_ordinary(WIKITEXT.read_text()) + [50256]
    assert p.sources[0].train.tokens().tolist() == ref
    assert p.sources[0].train.dtype == "<u2"


# ---------------------------------------------------------------- char / word
def test_char_vocab_from_train_split(tmp_path):
    p = _prepare(tmp_path, {"kind": "char"})
    tok = p.tokenizer
    chars = sorted(set(SHAKESPEARE_TRAIN))
    assert tok.vocab_size == p.vocab_size == len(chars) == 65
    assert tok.eot_id is None
    assert tok.encode("First") == [chars.index(c) for c in "First"]
    assert tok.decode(tok.encode(SHAKESPEARE_TRAIN[:500])) == SHAKESPEARE_TRAIN[:500]
    assert p.sources[0].train.n_tokens == len(SHAKESPEARE_TRAIN)
    with pytest.raises(DataError, match=r"'é' is not in the vocabulary fitted on the training split; set tokenizer.unk=true"):
        tok.encode("café")


def test_char_unk_and_eot(tmp_path):
    tok = _prepare(tmp_path, {"kind": "char", "unk": True, "eot": True}).tokenizer
    assert tok.vocab_size == 67 and (tok.unk_id, tok.eot_id) == (65, 66)
    assert tok.encode("café")[-1] == tok.unk_id
    assert tok.decode([tok.unk_id, tok.eot_id]) == "<unk><eot>"


def test_word_vocab_and_unk(tmp_path):
    p = _prepare(tmp_path, {"kind": "word", "unk": True})
    tok = p.tokenizer
    words = set(SHAKESPEARE_TRAIN.split()) | {"\n"}
    assert tok.vocab_size == len(words) + 1 == 22073
    assert tok.symbols[:3] == ["\n", "the", "I"]  # by frequency
    ids = tok.encode("First Citizen:\nzyzzyva speak")
    assert ids[3] == tok.unk_id and tok.unk_id not in ids[:3] + ids[4:]
    assert tok.decode(ids) == "First Citizen:\n<unk> speak"
    assert p.sources[0].valid.n_tokens > 0
    assert (p.sources[0].valid.tokens() == tok.unk_id).mean() > 0.05  # unseen validation words


def test_word_newlines_as_whitespace(tmp_path):
    """newlines=false reads text as str.split() does (the PTB / WikiText-2 convention): the vocabulary is
    exactly the training split's distinct words, a newline is no token, and the setting survives save/load
    and keys its own vocabulary cache entry; the default's saved form (and so its shard keys) is unchanged."""
    split = _prepare(tmp_path, {"kind": "word", "unk": True, "newlines": False}).tokenizer
    lines = _prepare(tmp_path, {"kind": "word", "unk": True}).tokenizer
    assert split.vocab_size == len(set(SHAKESPEARE_TRAIN.split())) + 1 == lines.vocab_size - 1
    assert "\n" not in split.symbols and "newlines" not in lines.meta()
    assert split.encode("First Citizen:\nBefore") == split.encode("First  Citizen:\tBefore") != lines.encode("First Citizen:\nBefore")
    assert len(split.encode(SHAKESPEARE_TRAIN[:5000])) == len(SHAKESPEARE_TRAIN[:5000].split())
    _same(split, load_tokenizer(split.save(tmp_path / "tok")), SHAKESPEARE_TRAIN[:2000])
    with pytest.raises(SettingsError, match=r"tokenizer.newlines='no' is invalid: expected true or false"):
        _prepare(tmp_path, {"kind": "word", "newlines": "no"})


def test_word_max_vocab_needs_unk(tmp_path):
    tok = _prepare(tmp_path, {"kind": "word", "unk": True, "max_vocab": 100}).tokenizer
    assert tok.vocab_size == 101
    with pytest.raises(DataError, match=r"tokenizer.max_vocab=100 drops \d+ symbols; set tokenizer.unk=true"):
        _prepare(tmp_path, {"kind": "word", "unk": False, "max_vocab": 100})


def test_word_uses_worker_processes(tmp_path, monkeypatch):
    from slm.data import shards

    monkeypatch.setattr(readers, "PIECE_BYTES", 4096)
    monkeypatch.setattr(shards, "CHUNK_CHARS", 8192)
    many = _prepare(tmp_path / "a", {"kind": "word", "unk": True, "eot": True}, {"num_proc": 2})
    one = _prepare(tmp_path / "b", {"kind": "word", "unk": True, "eot": True}, {"num_proc": 1})
    assert np.array_equal(many.sources[0].train.tokens(), one.sources[0].train.tokens())


# ---------------------------------------------------------------- hf
def _tiny_hf_tokenizer(directory: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([SHAKESPEARE_TRAIN[:20000]], trainer)
    directory.mkdir(parents=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    return directory


def test_hf_tokenizer_from_local_directory(tmp_path):
    path = _tiny_hf_tokenizer(tmp_path / "tok")
    p = _prepare(tmp_path, {"kind": "hf", "path": str(path), "eot": True, "pad_vocab_multiple": 64})
    tok = p.tokenizer
    assert tok.vocab_size == 300 and p.vocab_size == 320
    assert tok.eot_id == 1 and tok.name == "hf:tok"
    assert tok.decode(tok.encode("First Citizen:")) == "First Citizen:"
    train = p.sources[0].train.tokens()
    assert train[-1] == 1 and train.max() < 300
    assert len(train) < 0.8 * len(SHAKESPEARE_TRAIN)  # merges were learnt


def test_hf_errors(tmp_path):
    with pytest.raises(DataError, match=r"^tokenizer.path is not set"):
        _prepare(tmp_path, {"kind": "hf"})
    with pytest.raises(DataError, match=r"^tokenizer.path='/nonexistent/tok' is not a directory"):
        _prepare(tmp_path, {"kind": "hf", "path": "/nonexistent/tok"})
    path = _tiny_hf_tokenizer(tmp_path / "tok")
    with pytest.raises(DataError, match=r"tokenizer.eot_token='<eos>' is not a token of"):
        _prepare(tmp_path, {"kind": "hf", "path": str(path), "eot": True, "eot_token": "<eos>"})


# ---------------------------------------------------------------- save / load
@pytest.mark.parametrize("node", [{"kind": "char"}, {"kind": "char", "unk": True, "eot": True}, {"kind": "word", "unk": True},
                                  {"kind": "gpt2", "eot": True}, {"kind": "gpt2", "eot": False}, {"kind": "hf"}])
def test_save_load_round_trip(tmp_path, node):
    if node["kind"] == "hf":
        node = {"kind": "hf", "eot": True, "path": str(_tiny_hf_tokenizer(tmp_path / "tok"))}
    tok = _prepare(tmp_path, node).tokenizer
    tok.save(tmp_path / "saved")
    if node["kind"] == "hf":  # the saved copy loads without the original directory
        import shutil

        shutil.rmtree(node["path"])
    again = load_tokenizer(tmp_path / "saved")
    _same(tok, again, SHAKESPEARE_TRAIN[:2000])
    assert type(again) is type(tok)


def test_load_tokenizer_missing(tmp_path):
    with pytest.raises(DataError, match=r"^no slm_tokenizer.json in .*: not a saved slm tokenizer directory$"):
        load_tokenizer(tmp_path)


def test_unknown_tokenizer_and_keys(tmp_path):
    with pytest.raises(SettingsError, match=r"^tokenizer.kind='bpe' is invalid: one of: char, word, gpt2, hf$"):
        _prepare(tmp_path, {"kind": "bpe"})
    with pytest.raises(SettingsError, match=r"^tokenizer has unknown key 'vocab' \(did you mean max_vocab\?\): choose from kind, pad_vocab_multiple"):
        _prepare(tmp_path, {"kind": "char", "vocab": 3})
    with pytest.raises(SettingsError, match=r"^tokenizer.pad_vocab_multiple=0 is invalid: must be an integer > 0$"):
        _prepare(tmp_path, {"kind": "gpt2", "pad_vocab_multiple": 0})
