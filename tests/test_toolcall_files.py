"""`slm-toolcall <dir>` (slm/cli/toolcall.py, slm.toolcall.files): the task's files, readable as the post-training
records they claim to be; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slm.cli.toolcall import run
from slm.data.preference_records import read_preference_records, read_sft_records
from slm.eval.toolcall_tasks import documents
from slm.toolcall.corruptions import MODES
from slm.toolcall.files import read_items
from slm.toolcall.items import EVAL_SPLITS, SPLITS, generate
from slm.toolcall.verifier import verify


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    out = tmp_path_factory.mktemp("task")
    manifest = run([str(out), "--train", "60", "--corpus", "40", "--valid", "20", "--test", "30", "--seed", "2"])
    return out, manifest


def test_every_file_is_written_and_the_manifest_counts_them(task):
    out, manifest = task
    names = {"corpus.txt", "corpus_valid.txt", "sft_train.jsonl", "sft_valid.jsonl", "pairs_corrupt.jsonl",
             "pairs_corrupt_valid.jsonl", "manifest.json", *(f"items_{s}.jsonl" for s in SPLITS)}
    assert {p.name for p in out.iterdir()} == names  # no temporary file left
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert manifest["files"]["items_test_long.jsonl"] == {"items": 30}
    assert read_items(out / "items_test.jsonl") == generate("test", 2, 30)


def test_sft_and_pair_records_are_what_the_training_readers_take(task):
    out, _ = task
    sft = read_sft_records(out / "sft_train.jsonl", tokenize=list, context_length=256)
    train = generate("train", 2, 100)
    assert [(r.prompt, r.completion) for r in sft] == [(i["prompt"], i["answer"] + "\n") for i in train[:60]]
    assert len(read_sft_records(out / "sft_valid.jsonl")) == 20
    pairs = read_preference_records(out / "pairs_corrupt.jsonl", tokenize=list, context_length=256)
    rows = [json.loads(line) for line in (out / "pairs_corrupt.jsonl").read_text().splitlines()]
    assert len(pairs) == 60 and {r["mode"] for r in rows} <= set(MODES) and len({r["mode"] for r in rows}) >= 4
    for pair, item in zip(pairs, train):
        assert pair.chosen == item["answer"] + "\n" and verify(item, pair.chosen).exact
        assert pair.rejected.endswith("\n") and not verify(item, pair.rejected).exact


def test_the_corpus_holds_the_other_training_items_as_text(task):
    out, _ = task
    corpus = (out / "corpus.txt").read_text()
    items = generate("train", 2, 100)[60:]
    assert corpus == "\n".join(i["prompt"] + i["answer"] + "\n" for i in items)
    assert corpus.count("\nA: ") == 40 and items[0]["prompt"] not in (out / "sft_train.jsonl").read_text()


def test_one_corruption_mode_and_the_default_items_are_the_lm_eval_documents(tmp_path):
    run([str(tmp_path), "--train", "30", "--corpus", "1", "--valid", "5", "--test", "500",
         "--corruptions", "swapped_args"])
    rows = [json.loads(line) for line in (tmp_path / "pairs_corrupt.jsonl").read_text().splitlines()]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert {r["mode"] for r in rows} == {"swapped_args"}
    assert manifest["files"]["pairs_corrupt.jsonl"]["items_without_a_pair"] == 30 - len(rows) > 0
    for split in EVAL_SPLITS[:2]:
        assert [i["prompt"] for i in read_items(tmp_path / f"items_{split}.jsonl")] == \
            [d["prompt"] for d in documents(split)]


@pytest.mark.parametrize("argv, needle", [
    (["--train", "0"], "argument --train: 0: must be >= 1"),
    (["--corruptions", "wrong_tool,typo"], "'wrong_tool,typo' is invalid: a comma-separated list of wrong_tool"),
    (["--seed", "-1"], "argument --seed: -1: must be >= 0"),
    (["--test", "x"], "invalid int value: 'x'"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, argv, needle):
    with pytest.raises(SystemExit) as exit_:
        run([str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("slm-toolcall: error: ") and needle in err
    assert not (tmp_path / "out").exists()


def test_an_output_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    proc = subprocess.run([sys.executable, "-m", "slm.cli.main", "toolcall", str(tmp_path / "f")],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "is not a directory" in proc.stderr
    assert (tmp_path / "f").read_text() == "x"
