"""The function-calling task end to end: a tiny model trained a few steps by slm.runs.job.train_run on the task's
corpus (data=local), scored offline by lm-eval on the slm_toolcall tasks (eval=toolcall), each item's verifier scores
kept in the per-document file and paired by slm-compare's McNemar test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from slm.cli.toolcall import run as toolcall
from slm.runs.record import load_record

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

TASKS = ["slm_toolcall", "slm_toolcall_templates", "slm_toolcall_long", "slm_toolcall_combos"]
METRICS = ["exact_match", "format_valid", "name_acc", "args_acc", "result_acc"]
LIMIT = 6


def compose(overrides: list[str]) -> dict:
    from slm.cli.config import compose_config

    return OmegaConf.to_container(compose_config(overrides), resolve=True)


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("task")
    toolcall([str(out), "--train", "40", "--corpus", "300", "--valid", "30", "--test", "20"])
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory, task) -> Path:
    """A debug model (context 256) trained 12 steps on corpus.txt with a char vocabulary fitted on it."""
    from slm.runs.job import train_run

    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("SLM_CACHE", str(root / "cache"))
    cfg = compose(["model=debug", "model.n_layers=1", "model.d_model=32", "model.context_length=256", "data=local",
                   f"data.sources.0.paths=[{task / 'corpus.txt'}]",
                   f"data.sources.0.valid_paths=[{task / 'corpus_valid.txt'}]",
                   "eval=none", "train.length.steps=12", "train.batch_size=4", "train.validation.interval=12",
                   "train.validation.batches=1", "train.logging.print_interval=0", "train.logging.progress_bar=false"])
    try:
        record = train_run(cfg, root / "run")
    finally:
        mp.undo()
    assert record["status"] == "completed"
    return root / "run"


def _evaluate(run: Path) -> dict:
    from slm.eval.run import evaluate
    from slm.eval.spec import spec_from_config
    from slm.eval.summary import eval_section
    from slm.runs.record import update_record

    node = OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[1] / "conf/eval/toolcall.yaml"))
    spec = spec_from_config({**node, "limit": LIMIT, "device": "cpu", "log_samples": True})
    summary = evaluate(run, spec)
    update_record(run, eval=eval_section(summary, (load_record(run) or {}).get("eval")))
    return summary


def test_a_trained_run_is_scored_offline_with_every_items_scores_kept(trained):
    summary = _evaluate(trained)
    assert set(summary["scores"]) == set(TASKS) and summary["metrics"]["slm_toolcall"] == "exact_match,none"
    lines = [json.loads(line) for line in (trained / summary["documents_file"]).read_text().splitlines()]
    heads = {line["task"]: line for line in lines if "doc_id" not in line}
    assert set(heads) == set(TASKS)
    assert all(set(heads[t]["metrics"]) == {f"{m},none" for m in METRICS} for t in TASKS)
    docs = [line for line in lines if "doc_id" in line]
    assert len(docs) == LIMIT * len(TASKS)
    assert all(line[f"{m},none"] in (0.0, 1.0) for line in docs for m in METRICS)
    samples = trained / summary["documents_file"].replace("_documents", "_samples")
    first = json.loads(samples.read_text().splitlines()[0])
    assert first["arguments"][0][0].endswith("\nA: ") and first["arguments"][0][1]["until"] == ["\n"]
    lm = load_record(trained)["eval"]["lm_eval"]
    assert lm["scores"]["slm_toolcall_combos"] == summary["scores"]["slm_toolcall_combos"]


def test_slm_compare_pairs_two_runs_item_by_item_with_mcnemar(trained, tmp_path):
    import torch

    from analysis.paired import paired_difference
    from slm.model.weights import load_model, save_model

    other = tmp_path / "other"
    model = load_model(trained / "model", torch.device("cpu"), torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    save_model(model, other / "model")
    for f in (trained / "model").iterdir():
        if f.name.startswith("slm_tokenizer"):
            (other / "model" / f.name).write_bytes(f.read_bytes())
    from slm.runs.record import update_record

    update_record(other, status="completed", eval={"val_nll": 4.0})
    _evaluate(other)
    _evaluate(trained)  # not left to an earlier test: pytest-xdist may run this one first on its worker
    result = paired_difference(trained, other, "slm_toolcall")
    assert result.test == "McNemar exact" and result.n == LIMIT and result.metric == "exact_match,none"


# --- slm-pairs: a teacher's samples, verified, paired ------------------------------------------------------------

def _pairs(argv, capsys) -> tuple[dict, str]:
    from slm.cli.pairs import run as pairs

    summary = pairs([str(a) for a in argv])
    return summary, capsys.readouterr().err


def test_slm_pairs_samples_the_teacher_and_states_what_it_did(trained, task, tmp_path, capsys):
    out = tmp_path / "p" / "pairs.jsonl"
    summary, err = _pairs([trained, out, "--items", task / "items_train.jsonl", "-k", "3", "--temperature", "1.5",
                           "--limit", "4", "--device", "cpu"], capsys)
    assert [line for line in err.splitlines() if "prompt" in line][-1].startswith("slm-pairs: prompt 4 of 4")
    assert summary["k"] == 3 and summary["temperature"] == 1.5 and summary["prompts"] == 4
    assert summary["samples"] == 12 and summary["pairs"] + sum(summary["no_pair"].values()) == 4
    assert json.loads((out.parent / "pairs.summary.json").read_text()) == summary
    assert summary["teacher_run"] == str(trained)
    assert len(out.read_text().splitlines()) == summary["pairs"]
    again, _ = _pairs([trained, tmp_path / "again.jsonl", "--items", task / "items_train.jsonl", "-k", "3",
                       "--temperature", "1.5", "--limit", "4", "--device", "cpu"], capsys)
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in summary.items() if k != "seconds"}


def test_slm_pairs_pairs_a_correct_and_an_incorrect_sample_of_each_prompt(trained, task, tmp_path, capsys,
                                                                             monkeypatch):
    """The model's samples replaced by known texts: gold, a corruption, a blank line (never drawn)."""
    import slm.model.generate as decoding
    from slm.cli.generate import load_tokenizer_dir
    from slm.data.preference_records import read_preference_records, read_sft_records
    from slm.toolcall.corruptions import corrupt
    from slm.toolcall.files import read_items

    items = read_items(task / "items_train.jsonl")[:3]
    tok = load_tokenizer_dir(trained / "model")
    by_prompt = {tuple(tok.encode(i["prompt"])): i for i in items}
    texts = {0: lambda i: [i["answer"] + "\nmore", corrupt(i, "broken_brace") + "\n", "\n"],  # a pair
             1: lambda i: [i["answer"] + "\n"] * 3,                                             # all correct
             2: lambda i: ["\n", "\n", "x\n"]}                                                  # none correct

    def fake(model, prompts, max_new_tokens, **kwargs):
        item = by_prompt[tuple(prompts[0])]
        return [tok.encode(t) for t in texts[items.index(item)](item)]

    monkeypatch.setattr(decoding, "generate", fake)
    out = tmp_path / "pairs.jsonl"
    summary, _ = _pairs([trained, out, "--items", task / "items_train.jsonl", "-k", "3", "--limit", "3",
                         "--device", "cpu"], capsys)
    assert summary["pairs"] == 1 and summary["no_pair"] == {"all_correct": 1, "none_correct": 1,
                                                            "only_blank_incorrect": 0}
    assert summary["correct_rate"] == 4 / 9
    (record,) = read_preference_records(out, tokenize=tok.encode, context_length=256)
    assert (record.prompt, record.chosen, record.rejected) == (
        items[0]["prompt"], items[0]["answer"] + "\n", corrupt(items[0], "broken_brace") + "\n")
    correct = read_sft_records(tmp_path / "pairs.correct.jsonl")
    assert [(r.prompt, r.completion) for r in correct] == [(i["prompt"], i["answer"] + "\n") for i in items[:2]]


@pytest.mark.parametrize("argv, needle", [
    (["-k", "1"], "argument -k: 1: must be in 2..1024"),
    (["--temperature", "0"], "argument --temperature/-t: 0: must be > 0"),
    (["--items", "NOFILE"], "NOFILE: cannot read the items"),
    (["--items", "BADFILE"], "BADFILE:1: not an item (missing"),
])
def test_slm_pairs_bad_input_is_one_line_and_exit_2(trained, task, tmp_path, capsys, argv, needle):
    (tmp_path / "BADFILE").write_text('{"prompt": "x"}\n')
    argv = [str(tmp_path / a) if a in ("NOFILE", "BADFILE") else a for a in argv]
    if "--items" not in argv:
        argv += ["--items", str(task / "items_train.jsonl")]
    with pytest.raises(SystemExit) as exit_:
        _pairs([trained, tmp_path / "out.jsonl", *argv], capsys)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("slm-pairs: error: ") and needle in err
    assert not (tmp_path / "out.jsonl").exists()


def test_slm_pairs_refuses_items_its_teacher_cannot_read(trained, tmp_path, capsys):
    item = {"id": "u", "prompt": "tools: add(a,b)\nQ: what is 1 plus 2? \u00e9\nA: ", "answer": "", "calls": [],
            "tools": ["add"], "result": None}
    (tmp_path / "items.jsonl").write_text(json.dumps(item) + "\n")
    with pytest.raises(SystemExit) as exit_:
        _pairs([trained, tmp_path / "out.jsonl", "--items", tmp_path / "items.jsonl", "--device", "cpu"], capsys)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "outside the teacher's vocabulary: 'é'" in err
