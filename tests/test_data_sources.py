"""Sources: the shipped Tiny Shakespeare splits, local text/jsonl/parquet files with globs, held-out
validation, hub datasets (offline failure, and the stream logic against a local stand-in), corpora published
as train/valid/test splits (PTB, WikiText-2: a local directory or the hub), and the one-line error of each
kind of bad input."""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path

import pytest

from slm.data import DataError, SLMDataModule, prepare
from slm.settings import SettingsError

DATA = Path(__file__).parent / "data"
WIKITEXT = DATA / "wikitext2_valid_excerpt.txt"
DOCS = [f"Document number {i}: " + "lorem ipsum dolor sit amet " * (i % 7 + 1) for i in range(60)]


def _prepare(tmp_path, sources: list[dict], tokenizer: dict | None = None, **data):
    node = {"cache_dir": str(tmp_path / "cache"), "sources": sources, **data}
    return prepare(node, tokenizer or {"kind": "char", "eot": True, "unk": True})


def _text(prepared, split: str, i: int = 0) -> str:
    shard = getattr(prepared.sources[i], split)
    return prepared.tokenizer.decode(shard.tokens().tolist())


def _write_jsonl(path: Path, docs: list[str], field: str = "text") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)))
    return path


def _write_parquet(path: Path, docs: list[str], field: str = "text") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({field: docs, "id": list(range(len(docs)))}), path, row_group_size=16)
    return path


# ---------------------------------------------------------------- shipped corpus
def test_tiny_shakespeare_splits(tmp_path):
    p = _prepare(tmp_path, [{"kind": "tiny_shakespeare"}], {"kind": "char"})
    files = resources.files("slm.data").joinpath("corpora/tiny_shakespeare")
    assert _text(p, "train") == files.joinpath("train.txt").read_text()
    assert _text(p, "valid") == files.joinpath("valid.txt").read_text()
    assert (p.sources[0].train.n_tokens, p.sources[0].valid.n_tokens) == (892_117, 111_669)
    d = p.describe()
    assert d["sources"][0]["name"] == "tiny_shakespeare" and d["sources"][0]["train_tokens"] == 892_117
    json.dumps(d)


def test_default_node_is_tiny_shakespeare(tmp_path):
    p = prepare({"cache_dir": str(tmp_path)}, {})
    assert p.sources[0].name == "tiny_shakespeare" and p.tokenizer.vocab_size == 65


def test_conf_files_match_the_dataclasses():
    from dataclasses import fields

    from omegaconf import OmegaConf

    from slm.data import DataConfig, SourceConfig, TokenizerConfig

    conf = Path(__file__).parents[1] / "conf"
    for f in (conf / "tokenizer").glob("*.yaml"):
        node = OmegaConf.to_container(OmegaConf.load(f))
        assert list(node) == [x.name for x in fields(TokenizerConfig)], f
        TokenizerConfig.from_node(node)
    names = [x.name for x in fields(SourceConfig)]
    for f in (conf / "data").glob("*.yaml"):
        node = OmegaConf.to_container(OmegaConf.load(f))
        assert list(node) == ["name", "token_budget", "cache_dir", "num_proc", "pack_documents", "sources"], f
        for source in node["sources"]:
            assert set(source) <= set(names), f
        if f.stem != "local":
            DataConfig.from_node(node)
    mix = OmegaConf.to_container(OmegaConf.load(conf / "data" / "mix_finepdfs_dclm_edu.yaml"))
    assert [(s["dataset"], s["weight"]) for s in mix["sources"]] == [
        ("HuggingFaceFW/finepdfs", 0.5), ("mlfoundations/dclm-baseline-1.0", 0.3), ("HuggingFaceFW/fineweb-edu", 0.2)]


# ---------------------------------------------------------------- local files
def test_local_text_glob_with_held_out_tail(tmp_path):
    for i in range(3):
        (tmp_path / "txt").mkdir(exist_ok=True)
        (tmp_path / "txt" / f"part{i}.txt").write_text("".join(f"line {i}.{j} of the corpus\n" for j in range(200)))
    p = _prepare(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "txt" / "*.txt")], "valid_fraction": 0.1}])
    train, valid = _text(p, "train"), _text(p, "valid")
    assert train.startswith("line 0.0 ") and valid.endswith("line 2.199 of the corpus\n<eot>")
    whole = "".join((tmp_path / "txt" / f"part{i}.txt").read_text() + "<eot>" for i in range(3))
    assert train + valid == whole
    assert 0.08 < len(valid) / len(whole) < 0.12
    assert p.describe()["sources"][0]["paths"] == [str(tmp_path / "txt" / f"part{i}.txt") for i in range(3)]


def test_local_jsonl_recursive_glob_and_valid_paths(tmp_path):
    _write_jsonl(tmp_path / "a" / "x.jsonl", DOCS[:30])
    _write_jsonl(tmp_path / "a" / "b" / "y.jsonl", DOCS[30:50])
    _write_jsonl(tmp_path / "val.jsonl", DOCS[50:])
    p = _prepare(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "a" / "**" / "*.jsonl")],
                             "valid_paths": [str(tmp_path / "val.jsonl")]}])
    assert _text(p, "train") == "".join(d + "<eot>" for d in DOCS[30:50] + DOCS[:30])  # sorted: a/b/y before a/x
    assert _text(p, "valid") == "".join(d + "<eot>" for d in DOCS[50:])


def test_local_jsonl_held_out_whole_records(tmp_path):
    _write_jsonl(tmp_path / "d.jsonl", DOCS)
    p = _prepare(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "d.jsonl")], "valid_fraction": 0.2}])
    train_docs, valid_docs = _text(p, "train").split("<eot>")[:-1], _text(p, "valid").split("<eot>")[:-1]
    assert train_docs + valid_docs == DOCS and 6 < len(valid_docs) < 18


def test_local_parquet_text_field(tmp_path):
    _write_parquet(tmp_path / "p" / "0.parquet", DOCS[:40], field="content")
    _write_parquet(tmp_path / "p" / "1.parquet", DOCS[40:], field="content")
    p = _prepare(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "p" / "*.parquet")], "text_field": "content",
                             "valid_fraction": 0.25}], {"kind": "gpt2", "eot": True})
    docs = [p.tokenizer.decode(s.tokens().tolist()) for s in (p.sources[0].train, p.sources[0].valid)]
    assert docs[0].split("<|endoftext|>")[:-1] == DOCS[:45] and docs[1].split("<|endoftext|>")[:-1] == DOCS[45:]


def test_token_budget_caps_training_tokens(tmp_path):
    p = _prepare(tmp_path, [{"kind": "tiny_shakespeare", "token_budget": 5000}])
    assert p.sources[0].train.n_tokens == 5000 and p.sources[0].valid.n_tokens == 111_669 + 1  # + eot
    p = _prepare(tmp_path, [{"name": "a", "kind": "tiny_shakespeare", "weight": 3}, {"name": "b", "kind": "tiny_shakespeare"}],
                 token_budget=8000)
    assert [s.train.n_tokens for s in p.sources] == [6000, 2000]
    assert [s.weight for s in p.sources] == [0.75, 0.25]


# ---------------------------------------------------------------- bad input: one line each
def _one_line_error(tmp_path, sources, match, tokenizer=None, **data):
    with pytest.raises((DataError, SettingsError), match=match) as err:
        _prepare(tmp_path, sources, tokenizer, **data)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_missing_file_and_unmatched_glob(tmp_path):
    _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "nope.txt")]}],
                    r"^data.sources.0.paths: file not found: .*nope.txt$")
    _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "*.jsonl")]}],
                    r"^data.sources.0.paths: no file matches '.*\*.jsonl'$")
    _one_line_error(tmp_path, [{"kind": "local", "paths": []}], r"^data.sources.0.paths is empty: list the files, e.g. data=local")


def test_empty_file(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "empty.txt")]}],
                    r"^data.sources.0.paths: file .*empty.txt is empty$")


def test_undecodable_bytes_name_file_and_offset(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"good text\nmore text\n" + b"caf\xe9 latin-1\n" + b"rest\n" * 10)
    _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "bad.txt")]}],
                    r"^.*bad.txt: invalid UTF-8 at byte 23 \(b'\\xe9 la'\); text sources must be UTF-8$")
    (tmp_path / "bad.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "bad.jsonl")], "valid_fraction": 0.01}],
                    r"^.*bad.jsonl: invalid UTF-8 at byte 28 ")


def test_bad_records(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"body": "a"}\n')
    _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "x.jsonl")]}],
                    r"x.jsonl: byte 0: the record has no field 'text' \(it has: body\); set the source's text_field$")
    (tmp_path / "y.jsonl").write_text('{"text": "a"}\nnot json\n')
    _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "y.jsonl")]}],
                    r"y.jsonl: byte 14: not valid JSON")
    _write_parquet(tmp_path / "z.parquet", DOCS)
    _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "z.parquet")], "text_field": "body"}],
                    r"z.parquet: no column 'body' \(columns: text, id\); set the source's text_field$")
    (tmp_path / "w.csv").write_text("a,b\n")
    _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "w.csv")]}],
                    r"^data.sources.0.format=auto cannot tell the format of .*w.csv \(extension '.csv'\)")


def test_bad_config_values(tmp_path):
    _one_line_error(tmp_path, [{"kind": "web"}],
                    r"^data.sources.0.kind='web' is invalid: one of: tiny_shakespeare, local, hub, splits, probes$")
    _one_line_error(tmp_path, [{"kind": "local", "pathz": ["a"]}], r"^data.sources.0 has unknown key 'pathz' \(did you mean paths\?\): choose from name, kind")
    _one_line_error(tmp_path, [{"kind": "tiny_shakespeare", "weight": 0}], r"^data.sources.0.weight=0 is invalid: must be a number > 0$")
    _one_line_error(tmp_path, [{"kind": "tiny_shakespeare"}, {"kind": "tiny_shakespeare"}],
                    r"^data.sources.1.name='tiny_shakespeare' is invalid: used by an earlier source; give each source a "
                    r"distinct name$")
    _one_line_error(tmp_path, [{"kind": "tiny_shakespeare"}], r"^data.token_budget=-5 is invalid", token_budget=-5)
    _one_line_error(tmp_path, [], r"^data.sources=\[\] is invalid: must be a non-empty list")


def test_unseen_character_in_validation_is_an_error_without_unk(tmp_path):
    (tmp_path / "t.txt").write_text("abc abc\n" * 50)
    (tmp_path / "v.txt").write_text("abd\n")
    msg = _one_line_error(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "t.txt")], "valid_paths": [str(tmp_path / "v.txt")]}],
                          r"^local/valid: char tokenizer: 'd' is not in the vocabulary fitted on the training split", {"kind": "char"})
    assert "tokenizer.unk=true" in msg


def test_training_split_shorter_than_a_window(tmp_path):
    (tmp_path / "short.txt").write_text("a few words\n" * 5)
    p = _prepare(tmp_path, [{"kind": "local", "paths": [str(tmp_path / "short.txt")], "valid_paths": [str(tmp_path / "short.txt")]}])
    with pytest.raises(DataError, match=r"^source 'local' has 61 training tokens; it needs at least context_length \+ 1 = 129 "):
        SLMDataModule(p, batch_size=2, context_length=128, seed=0, val_batches=1)
    SLMDataModule(p, batch_size=2, context_length=60, seed=0, val_batches=1)


# ---------------------------------------------------------------- hub
HUB = {"name": "edu", "kind": "hub", "dataset": "HuggingFaceFW/fineweb-edu", "subset": "sample-10BT", "valid_documents": 5}


def test_hub_offline_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    msg = _one_line_error(tmp_path, [HUB], r"^hub dataset 'HuggingFaceFW/fineweb-edu' \(data.sources.0\) cannot be reached: "
                          r"HF_HUB_OFFLINE=1 \(offline mode\); use local files instead, e.g. data=local 'data.sources.0.paths=",
                          {"kind": "gpt2"}, token_budget=1000)
    assert time.perf_counter() - start < 5, msg


def test_hub_unreachable_endpoint_fails_fast(tmp_path, monkeypatch):
    from huggingface_hub import constants

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9
    start = time.perf_counter()
    _one_line_error(tmp_path, [HUB], r"^hub dataset 'HuggingFaceFW/fineweb-edu' \(data.sources.0\) cannot be reached: "
                    r"no connection to http://127.0.0.1:9 within 3 s", {"kind": "gpt2"}, token_budget=1000)
    assert time.perf_counter() - start < 5


def test_hub_needs_a_budget_and_a_dataset(tmp_path):
    _one_line_error(tmp_path, [HUB], r"^data.sources.0: hub dataset 'HuggingFaceFW/fineweb-edu' needs a token budget; "
                    r"set data.token_budget or data.sources.0.token_budget$")
    _one_line_error(tmp_path, [{"kind": "hub"}], r"^data.sources.0.dataset is not set", token_budget=10)


def test_hub_stream_split_and_budget(tmp_path, monkeypatch):
    """The hub logic against a local stand-in for datasets.load_dataset: validation is the first
    valid_documents documents, training the rest up to the budget; a second prepare needs no network."""
    import datasets

    from slm.data import hub

    calls = []

    def fake_load_dataset(path, name=None, split=None, streaming=False, revision=None):
        calls.append((path, name, split, streaming))
        return datasets.Dataset.from_dict({"text": DOCS, "id": list(range(len(DOCS)))}).to_iterable_dataset()

    monkeypatch.setattr(hub, "check_reachable", lambda cfg, instead=None: None)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    p = _prepare(tmp_path, [HUB], {"kind": "gpt2", "eot": True}, token_budget=300)
    assert calls[0] == ("HuggingFaceFW/fineweb-edu", "sample-10BT", "train", True)
    valid = p.tokenizer.decode(p.sources[0].valid.tokens().tolist())
    assert valid.split("<|endoftext|>")[:-1] == DOCS[:5]
    train = p.tokenizer.decode(p.sources[0].train.tokens().tolist())
    assert p.sources[0].train.n_tokens == 300 and train.startswith(DOCS[5])

    monkeypatch.setattr(hub, "check_reachable", lambda cfg, instead=None: pytest.fail("the cached shards need no network"))
    again = _prepare(tmp_path, [HUB], {"kind": "gpt2", "eot": True}, token_budget=300)
    assert again.describe()["sources"][0]["reused_cache"] == {"train": True, "valid": True}


# ---------------------------------------------------------------- train/valid/test corpora (PTB, WikiText-2)
PTB_LINES = {"train": [" the cat sat on the mat ", " a dog ran <unk> N times ", " the end "] * 20,
             "valid": [" the dog sat ", " a cat ran "], "test": [" the mat ran N times "]}


def _ptb_node(**source) -> dict:
    """conf/data/ptb.yaml as slm-train reads it (no $SLM_PTB_DIR), with `source` fields changed."""
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "conf" / "data" / "ptb.yaml"))
    node["sources"][0].update({"dir": None, **source})
    return node


def _ptb_dir(tmp_path) -> Path:
    root = tmp_path / "ptb"
    root.mkdir()
    for split, lines in PTB_LINES.items():
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


WORDS = {"kind": "word", "newlines": False, "unk": False}


def test_splits_from_a_local_directory(tmp_path):
    """The three files, read as str.split() reads them: the vocabulary is the training words (<unk> and N are
    words of the corpus), the test split is kept, and a token budget takes the first tokens of training."""
    node = _ptb_node(dir=str(_ptb_dir(tmp_path)))
    p = prepare({**node, "cache_dir": str(tmp_path / "cache"), "token_budget": 50}, WORDS)
    train_words = " ".join(PTB_LINES["train"]).split()
    assert p.tokenizer.vocab_size == len(set(train_words)) == 12
    source = p.sources[0]
    assert source.train.n_tokens == 50 and p.tokenizer.decode(source.train.tokens().tolist()) == " ".join(train_words[:50])
    assert p.tokenizer.decode(source.test.tokens().tolist()) == "the mat ran N times"
    assert source.valid.n_tokens == 6 and p.describe()["sources"][0]["dir"] == node["sources"][0]["dir"]


def test_splits_missing_files_and_offline_hub_are_one_line(tmp_path, monkeypatch):
    root = _ptb_dir(tmp_path)
    (root / "test.txt").unlink()
    with pytest.raises(DataError, match=rf"^data.sources.0.dir={root}: test.txt not found there "
                                        r"\(the layout is train.txt, valid.txt, test.txt\)$"):
        prepare({**_ptb_node(dir=str(root)), "cache_dir": str(tmp_path / "cache")}, WORDS)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError) as err:
        prepare({**_ptb_node(), "cache_dir": str(tmp_path / "cache")}, WORDS)
    assert str(err.value) == ("hub dataset 'ptb-text-only/ptb_text_only' (data.sources.0) cannot be reached: "
                              "HF_HUB_OFFLINE=1 (offline mode); put train.txt, valid.txt, test.txt in a directory "
                              "and set data.sources.0.dir=/path/to/it")


def test_splits_from_the_hub(tmp_path, monkeypatch):
    """The hub path against a local stand-in for datasets.load_dataset: each of the three named splits is
    read whole, a row per line, and gives the same tokens as the local files."""
    import datasets

    from slm.data import hub

    calls = []

    def fake_load_dataset(path, name=None, split=None, streaming=False, revision=None):
        calls.append((path, name, split, revision))
        rows = PTB_LINES[{"validation": "valid"}.get(split, split)]
        return datasets.Dataset.from_dict({"sentence": rows}).to_iterable_dataset()

    monkeypatch.setattr(hub, "check_reachable", lambda cfg, instead=None: None)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    online = prepare({**_ptb_node(), "cache_dir": str(tmp_path / "a")}, WORDS)
    assert {c[2] for c in calls} == {"test", "train", "validation"}
    assert {c[:2] + c[3:] for c in calls} == {("ptb-text-only/ptb_text_only", "penn_treebank", "refs/convert/parquet")}
    local = prepare({**_ptb_node(dir=str(_ptb_dir(tmp_path))), "cache_dir": str(tmp_path / "b")}, WORDS)
    for split in ("train", "valid", "test"):
        assert (getattr(online.sources[0], split).tokens() == getattr(local.sources[0], split).tokens()).all()
