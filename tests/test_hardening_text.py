"""Held-out validation splits of non-ASCII UTF-8 text (issue 38: 80,000 characters of "été " lost their validation
split): accents, CJK, emoji and mixed text, one document (a text file) and many (text files, jsonl, parquet), under
every tokenizer (char, word, gpt2, a local hf one). A text split holds out valid_fraction of the characters (jsonl
and parquet: of the records), moved to the nearest point where tokenization is exact within a quarter of the
held-out part; the two sides cover the text with nothing lost or repeated, the validation split decodes to the
text's tail, and a split too small for a window is one line naming its file."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from slm.data import DataError, SLMDataModule, prepare, readers, sources
from slm.data.tokenizers import gpt2_encoding

ACCENTS = ["été", "naïve", "café", "Ångström", "Øre", "ñandú", "Ελλάδα", "Москва", "ça", "où", "crème",
           "Straße"]
CJK = ["日本語", "中文。", "한국어", "漢字", "「引用」", "テスト", "東京、", "北京", "読む", "！"]
EMOJI = ["😀", "👨\u200d👩\u200d👧", "👍🏽", "🇫🇷", "✨", "🦄", "❤️", "🍣", "🙂🙃"]
OTHER = ["plain", "words", "x1", "42", "שלום", "مرحبا", "e\u0301", "٣٤", "«quoi»", "—", "(ok)"]
GAPS = [" "] * 6 + ["\n", "\n\n", "  ", "\t", "\u3000", "\u00a0", " \n"]


def _text(words: list[str], gaps: list[str], n_chars: int, seed: int) -> str:
    rng, out, n = random.Random(seed), [], 0
    while n < n_chars:
        piece = rng.choice(words) + rng.choice(gaps)
        out.append(piece)
        n += len(piece)
    return "".join(out)


TEXTS = {  # one document each, ~6,000 characters
    "ete": "été " * 1500,
    "accents": _text(ACCENTS, [" ", " ", " ", "\n"], 6000, 1),
    "cjk_lines": _text(CJK, ["", "", "", "\n"], 6000, 2),  # CJK with no spaces: newlines are the only exact cuts
    "cjk_unbroken": _text(CJK, [""], 6000, 3),  # no whitespace at all: no exact cut, split at the character itself
    "emoji": _text(EMOJI, [" ", " ", "\n"], 6000, 4),
    "mixed": _text(ACCENTS + CJK + EMOJI + OTHER, GAPS, 6000, 5),
}
TOKENIZERS = ["char", "word", "gpt2", "hf"]
FRACTION = 0.1


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    """A tiny byte-level BPE (GPT-2's pre-tokenizer) trained offline on the texts above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(TEXTS.values()), trainer)
    directory = tmp_path_factory.mktemp("hf_tok")
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    return directory


def _tokenizer(kind: str, hf_dir: Path) -> dict:
    return {"kind": kind, "eot": True, **({"unk": True} if kind in ("char", "word") else {}),
            **({"path": str(hf_dir)} if kind == "hf" else {})}


def _prepare(tmp_path: Path, paths: list[Path], tokenizer: dict, fraction: float = FRACTION):
    return prepare({"cache_dir": str(tmp_path / "cache"), "num_proc": 1,
                    "sources": [{"kind": "local", "paths": [str(p) for p in paths], "valid_fraction": fraction}]},
                   tokenizer)


def _held(n: int, fraction: float) -> int:
    return math.floor(n * fraction + 0.5)


def _exact(text: str, j: int) -> bool:
    """Tokenization of text[:j] and text[j:] is that of text (the rule, in characters): before the space of
    "x Y", after the newline of "x\\nY", or between "\\n" and a last whitespace before "Y" (x, Y not whitespace)."""
    solid = lambda i: 0 <= i < len(text) and not text[i].isspace()  # noqa: E731
    if text[j] == " " and solid(j - 1) and solid(j + 1):
        return True
    if j >= 2 and text[j - 1] == "\n":
        return solid(j - 2) and solid(j) if solid(j) else text[j] in " \t\n\r" and solid(j + 1)
    return False


def _nearest(text: str, n: int, reach: int) -> int:
    """The exact point of text nearest character n (the later on a tie) within reach, else n."""
    points = [j for j in range(max(1, n - reach), min(len(text) - 1, n + reach) + 1) if _exact(text, j)]
    return min(points, key=lambda j: (abs(j - n), -j)) if points else n


def _expected_cut(text: str, fraction: float) -> int:
    """Character where a one-document text is split: the exact point nearest the nominal one within a quarter
    of the held-out part, else the nominal one."""
    held = _held(len(text), fraction)
    return _nearest(text, len(text) - held, held // 4)


def _ids(shard) -> list[int]:
    return shard.tokens().tolist()


# ---------------------------------------------------------------- one document
@pytest.mark.parametrize("kind", TOKENIZERS)
@pytest.mark.parametrize("name", list(TEXTS))
def test_one_document_split(tmp_path, hf_dir, name, kind):
    """Valid holds the text's last ~10% of characters; train + valid is the text; each side is encoded as that
    slice is alone (the split moved to an exact point where one is near, so together they encode as the text)."""
    text = TEXTS[name]
    path = tmp_path / f"{name}.txt"
    path.write_text(text, encoding="utf-8")
    p = _prepare(tmp_path, [path], _tokenizer(kind, hf_dir))
    tok, src = p.tokenizer, p.sources[0]
    train, valid = _ids(src.train), _ids(src.valid)
    k = _expected_cut(text, FRACTION)
    assert 0.75 * FRACTION <= (len(text) - k) / len(text) <= 1.25 * FRACTION
    assert valid[-1] == tok.eot_id and tok.eot_id not in train + valid[:-1]  # one document: one end, after valid
    assert train == tok.encode(text[:k]) and valid[:-1] == tok.encode(text[k:])
    if name != "cjk_unbroken":
        assert _exact(text, k) and train + valid[:-1] == tok.encode(text)
    if kind == "word":  # decode joins words with single spaces; words unseen in training are <unk>
        known = set(tok.symbols)
        assert tok.decode(valid[:-1]).split() == [w if w in known else "<unk>" for w in text[k:].split()]
    else:
        assert tok.decode(valid[:-1]) == text[k:] and tok.decode(train) == text[:k]


def test_the_issue_file_keeps_its_split_in_characters(tmp_path):
    """80,000 characters of "été " (120,000 bytes): 5% of the characters held out, not 5% of bytes nor none."""
    text = "été " * 20_000
    path = tmp_path / "ete.txt"
    path.write_text(text, encoding="utf-8")
    p = _prepare(tmp_path, [path], {"kind": "char"}, fraction=0.05)
    train, valid = p.sources[0].train, p.sources[0].valid
    assert (train.n_tokens, valid.n_tokens) == (75_999, 4_001)  # 4,000 moved one character back to a space
    assert p.tokenizer.decode(_ids(valid)) == text[75_999:]


def test_share_is_of_characters_not_bytes(tmp_path):
    """ASCII then CJK (3 bytes a character): 25% of the characters is 50% of the CJK half, not a sixth of it."""
    ascii_half = _text(["plain", "words", "here"], [" ", "\n"], 10_000, 6)
    cjk_half = _text(CJK, ["", "\n"], 10_000, 7)
    text = ascii_half + "\n" + cjk_half
    path = tmp_path / "two_scripts.txt"
    path.write_text(text, encoding="utf-8")
    p = _prepare(tmp_path, [path], {"kind": "char", "eot": True, "unk": True}, fraction=0.25)
    valid = p.tokenizer.decode(_ids(p.sources[0].valid)[:-1])
    k = _expected_cut(text, 0.25)
    assert valid == text[k:] and abs(len(valid) - len(text) / 4) <= len(text) / 16


def test_pieces_cut_next_to_non_ascii_and_tokenize_like_the_whole_file(tmp_path, monkeypatch):
    """Reading in small pieces: they cut between non-ASCII words too, and every tokenizer encodes them as the file."""
    from slm.data.config import TokenizerConfig
    from slm.data.tokenizers import WordTokenizer

    monkeypatch.setattr(readers, "PIECE_BYTES", 256)
    enc = gpt2_encoding()
    for name in ("ete", "accents", "emoji", "mixed", "cjk_lines"):
        text = TEXTS[name]
        path = tmp_path / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        pieces = [t for t, _ in readers.read(path, "text", "text")]
        assert "".join(pieces) == text and len(pieces) > len(text.encode()) // 512, name
        assert [i for t in pieces for i in enc.encode_ordinary(t)] == enc.encode_ordinary(text), name
        word = WordTokenizer.from_config(TokenizerConfig(kind="word"), WordTokenizer.fit_counts([text]))
        assert [i for t in pieces for i in word.encode(t)] == word.encode(text), name


# ---------------------------------------------------------------- many documents
SHORT = [_text(ACCENTS + OTHER, [" "], 40, 10 + i) for i in range(25)]
LONG = [_text(EMOJI + CJK, [" ", "\n"], 400, 50 + i) for i in range(15)]
DOCS = SHORT[:20] + LONG[:10] + SHORT[20:] + LONG[10:]
"""Short accented documents and long emoji/CJK ones: the last ten (five long) are a quarter of the records but
a third of the bytes of ASCII-escaped JSON."""


@pytest.mark.parametrize("kind", TOKENIZERS)
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_many_documents_split_by_records(tmp_path, hf_dir, fmt, kind):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / f"docs.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))  # ensure_ascii: "\ud83d\ude00"
    else:
        pq.write_table(pa.table({"text": DOCS}), path, row_group_size=7)
    p = _prepare(tmp_path, [path], _tokenizer(kind, hf_dir), fraction=0.25)
    tok, held = p.tokenizer, _held(len(DOCS), 0.25)
    assert held == 10
    encoded = lambda docs: [i for d in docs for i in tok.encode(d) + [tok.eot_id]]  # noqa: E731
    assert _ids(p.sources[0].train) == encoded(DOCS[:-held])
    assert _ids(p.sources[0].valid) == encoded(DOCS[-held:])


@pytest.mark.parametrize("kind", TOKENIZERS)
def test_many_text_files_split_by_characters(tmp_path, hf_dir, kind):
    """Four files (a document each) in four scripts: 30% of all their characters held out, cut inside the last
    file but one at an exact point; the files before it are training, those after it validation."""
    texts = [TEXTS["accents"][:3000], TEXTS["emoji"][:3000], TEXTS["mixed"][:3000], TEXTS["cjk_lines"][:3000]]
    paths = []
    for i, text in enumerate(texts):
        paths.append(tmp_path / f"part{i}.txt")
        paths[-1].write_text(text, encoding="utf-8")
    p = _prepare(tmp_path, paths, _tokenizer(kind, hf_dir), fraction=0.3)
    tok, total = p.tokenizer, sum(map(len, texts))
    held = _held(total, 0.3)
    n = total - held - 6000  # the nominal cut, in part2
    assert 0 < n < 3000
    k = _nearest(texts[2], n, held // 4)
    assert _exact(texts[2], k)
    eot = [tok.eot_id]
    assert _ids(p.sources[0].train) == tok.encode(texts[0]) + eot + tok.encode(texts[1]) + eot + tok.encode(texts[2][:k])
    assert _ids(p.sources[0].valid) == tok.encode(texts[2][k:]) + eot + tok.encode(texts[3]) + eot


@pytest.mark.parametrize("kind", ["gpt2", "hf"])
def test_bytes_per_token_counts_the_documents_bytes(tmp_path, hf_dir, kind):
    """Bits per byte divide by the documents' UTF-8 bytes: an end-of-text id is a token, its "<|endoftext|>" no byte."""
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8")
    p = _prepare(tmp_path, [path], _tokenizer(kind, hf_dir), fraction=0.25)
    text_bytes = sum(len(d.encode("utf-8")) for d in DOCS[-10:])
    assert p.bytes_per_token("valid") == pytest.approx(text_bytes / p.sources[0].valid.n_tokens, rel=1e-12)


# ---------------------------------------------------------------- too small, cache
def _too_small(prepared) -> str:
    with pytest.raises(DataError) as err:
        SLMDataModule(prepared, batch_size=2, context_length=64, seed=0, val_batches=1)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_too_small_validation_split_names_the_file(tmp_path):
    path = tmp_path / "petit.txt"
    path.write_text("été " * 300, encoding="utf-8")  # 5% of 1,200 characters: 60, under a window of 65
    msg = _too_small(_prepare(tmp_path, [path], {"kind": "char"}, fraction=0.05))
    assert msg == (f"source 'local' has 61 validation tokens; it needs at least context_length + 1 = 65 (validation "
                   f"text: the last 5% of the characters of {path}; use a shorter context or more data)")
    docs = tmp_path / "trois.jsonl"
    docs.write_text("".join(json.dumps({"text": "日本語 " * 40}) + "\n" for _ in range(3)))  # 5% of 3 records: none
    msg = _too_small(_prepare(tmp_path, [docs], {"kind": "char"}, fraction=0.05))
    assert msg.startswith("source 'local' has 0 validation tokens;") and f"records of {docs};" in msg


def test_cache_key_follows_the_split_rule(tmp_path, monkeypatch):
    """A shard split by an older rule (bytes) or read in older pieces is not reused: their versions are in the key."""
    path = tmp_path / "ete.txt"
    path.write_text("été " * 500, encoding="utf-8")
    keys = lambda: _prepare(tmp_path, [path], {"kind": "char"}).describe()["sources"][0]["cache_keys"]  # noqa: E731
    now = keys()
    monkeypatch.setattr(sources, "HOLDOUT_VERSION", 1)
    assert keys()["valid"] != now["valid"]
    monkeypatch.setattr(sources, "HOLDOUT_VERSION", 2)
    monkeypatch.setattr(readers, "PIECES_VERSION", 1)
    assert keys()["train"] != now["train"]


# ---------------------------------------------------------------- end to end
def test_slm_train_on_the_issue_file(tmp_path):
    path = tmp_path / "ete.txt"
    path.write_text("été " * 20_000, encoding="utf-8")
    env = {**os.environ, "SLM_RUNS": str(tmp_path / "runs"), "SLM_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "slm.cli.train", "model=debug", "data=local",
                          f"data.sources.0.paths=[{path}]", "train.length.steps=2", "eval=none",
                          "train.logging.progress_bar=false"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (record,) = (tmp_path / "runs").rglob("result.json")
    data = json.loads(record.read_text())["data"]["sources"][0]
    assert (data["train_tokens"], data["valid_tokens"]) == (75_999, 4_001)
