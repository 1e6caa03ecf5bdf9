"""Per-document results of an evaluation (slm.eval.run: <results stem>_documents.jsonl) on the shipped offline
tasks with two tiny char-level models, and slm-compare (analysis/paired.py) on the two runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
import yaml

from analysis.cli import compare_main
from analysis.paired import compare_runs, load_documents
from slm.data.tokenizers import CharTokenizer
from slm.eval.offline_tasks import ppl_documents, speeches
from slm.eval.documents import document_lines
from slm.eval.run import evaluate
from slm.eval.spec import EvalSpec, spec_from_config
from slm.eval.summary import eval_section
from slm.model import ModelConfig, Transformer
from slm.model.weights import save_model
from slm.runs.record import load_record, update_record

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

TASKS = ["slm_shakespeare_bpb", "slm_shakespeare_mc"]
LIMIT = 8
CONF = Path(__file__).resolve().parents[1] / "conf" / "eval"


def _tiny_run(path: Path, seed: int) -> Path:
    """A finished run as slm-train leaves it (result.json, model/ with weights and the char tokenizer)."""
    text = "\n\n".join("\n".join(s) for s in speeches())
    tok = CharTokenizer(CharTokenizer.select(CharTokenizer.fit_counts([text]), None), unk=False, eot=False)
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(n_layers=2, d_model=48, attention=dict(n_heads=4, n_kv_heads=2),
                                    vocab_size=tok.vocab_size, context_length=64))
    save_model(model, path / "model")
    tok.save(path / "model")
    update_record(path, status="completed", eval={"val_nll": 4.0})
    return path


def _evaluate(run: Path, output_path: Path | None = None, **spec) -> dict:
    summary = evaluate(run, EvalSpec(**{"tasks": TASKS, "limit": LIMIT, "throughput": False, "device": "cpu",
                                        "batch_size": 8, "metrics": {"slm_shakespeare_bpb": "bits_per_byte,none",
                                                                     "slm_shakespeare_mc": "acc_norm,none"},
                                        **spec}), output_path)
    update_record(run, eval=eval_section(summary, (load_record(run) or {}).get("eval")))
    return summary


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two evaluated runs whose models differ (seeds 0 and 1)."""
    out = []
    for seed in (0, 1):
        run = _tiny_run(tmp_path_factory.mktemp(f"run{seed}"), seed)
        out.append((run, _evaluate(run)))
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_evaluate_keeps_every_documents_scores_beside_the_results(runs):
    run, summary = runs[0]
    results_file = run / summary["results_file"]
    documents_file = run / summary["documents_file"]
    assert documents_file == results_file.with_name(results_file.stem + "_documents.jsonl")
    assert not results_file.with_name(results_file.stem + "_samples.jsonl").exists()  # log_samples not asked for
    lm = load_record(run)["eval"]["lm_eval"]
    assert lm["documents_file"] == summary["documents_file"]
    assert {t: lm["details"][t]["documents_file"] for t in TASKS} == dict.fromkeys(TASKS, summary["documents_file"])

    lines = _lines(documents_file)
    heads = {line["task"]: line for line in lines if "doc_id" not in line}
    docs = {t: [line for line in lines if line["task"] == t and "doc_id" in line] for t in TASKS}
    assert set(heads) == set(TASKS) and all(len(docs[t]) == LIMIT for t in TASKS)
    assert [d["doc_id"] for d in docs["slm_shakespeare_mc"]] == list(range(LIMIT))
    assert heads["slm_shakespeare_mc"]["metrics"] == {
        "acc,none": {"aggregation": "mean", "higher_is_better": True},
        "acc_norm,none": {"aggregation": "mean", "higher_is_better": True}}
    assert heads["slm_shakespeare_bpb"]["metrics"]["bits_per_byte,none"] == {"aggregation": "bits_per_byte",
                                                                            "higher_is_better": False}
    assert all(len(d["doc_hash"]) == 16 and len(d["prompt_hash"]) == 16 for t in TASKS for d in docs[t])
    assert len({d["doc_hash"] for d in docs["slm_shakespeare_mc"]}) == LIMIT

    scores = summary["results"]["results"]
    for metric in ("acc,none", "acc_norm,none"):  # per-document 0/1 values average to lm-eval's score
        values = [d[metric] for d in docs["slm_shakespeare_mc"]]
        assert set(values) <= {0.0, 1.0}
        assert sum(values) / LIMIT == pytest.approx(scores["slm_shakespeare_mc"][metric])
    ppl = docs["slm_shakespeare_bpb"]  # [log-likelihood, bytes]: lm-eval's bits_per_byte back from the pairs
    texts = [d["text"] for d in ppl_documents()[:LIMIT]]
    assert [d["bits_per_byte,none"][1] for d in ppl] == [len(t.encode()) for t in texts]
    assert [d["word_perplexity,none"][1] for d in ppl] == [len(re.split(r"\s+", t)) for t in texts]
    bpb = -sum(d["bits_per_byte,none"][0] for d in ppl) / sum(d["bits_per_byte,none"][1] for d in ppl) / math.log(2)
    assert bpb == pytest.approx(scores["slm_shakespeare_bpb"]["bits_per_byte,none"])


def test_per_document_off_and_log_samples_on(tmp_path):
    run = _tiny_run(tmp_path / "run", 0)
    _evaluate(run, limit=2)
    out = tmp_path / "out"
    off = _evaluate(run, tasks=["slm_shakespeare_mc"], limit=2, per_document=False, output_path=out / "off.json")
    assert "documents_file" not in off and sorted(p.name for p in out.iterdir()) == ["off.json"]
    lm = load_record(run)["eval"]["lm_eval"]
    assert "documents_file" not in lm and "documents_file" not in lm["details"]["slm_shakespeare_mc"]
    assert lm["details"]["slm_shakespeare_bpb"]["documents_file"]  # an earlier evaluation's task keeps its file
    both = _evaluate(run, tasks=["slm_shakespeare_mc"], limit=2, log_samples=True, output_path=out / "on.json")
    assert both["documents_file"] == str(out / "on_documents.jsonl")  # outside the run: absolute
    full = _lines(out / "on_samples.jsonl")
    assert len(full) == 2 and "doc" in full[0] and "arguments" in full[0]
    assert load_documents(run).tasks["slm_shakespeare_mc"].file == out / "on_documents.jsonl"


def test_eval_configs_document_per_document():
    for name in ("offline", "study7"):
        text = (CONF / f"{name}.yaml").read_text()
        assert "per_document:" in text
        assert spec_from_config(yaml.safe_load(text)).per_document is True
    assert spec_from_config({"tasks": ["x"], "per_document": False}).per_document is False


def test_document_lines_merge_filters_and_list_groups():
    def sample(doc_id, flt, em):
        return {"doc_id": doc_id, "filter": flt, "metrics": ["exact_match", "bleu"], "exact_match": em,
                "bleu": ("ref", "pred"), "doc_hash": "ab" * 32, "prompt_hash": "cd" * 32}

    samples = {"gen": [sample(1, "strict", 1.0), sample(0, "strict", 0.0), sample(1, "loose", True),
                       sample(0, "loose", float("nan"))]}
    results = {"configs": {"gen": {"metric_list": [{"metric": "exact_match", "aggregation": "mean",
                                                    "higher_is_better": True}]}},
               "higher_is_better": {"gen": {"exact_match": True, "bleu": True}}, "n-shot": {"gen": 5},
               "group_subtasks": {"suite": ["sub"], "sub": ["gen"]}}
    lines = [json.loads(line) for line in document_lines(samples, results)]
    em = {"aggregation": "mean", "higher_is_better": True}
    assert lines[0] == {"task": "gen", "metrics": {"exact_match,strict": em, "exact_match,loose": em},
                        "documents": 2, "num_fewshot": 5, "version": None}
    assert lines[1:3] == [  # bleu (a corpus-level pair of strings) is left out; NaN is null
        {"task": "gen", "doc_id": 0, "doc_hash": "ab" * 8, "prompt_hash": "cd" * 8, "exact_match,strict": 0.0,
         "exact_match,loose": None},
        {"task": "gen", "doc_id": 1, "doc_hash": "ab" * 8, "prompt_hash": "cd" * 8, "exact_match,strict": 1.0,
         "exact_match,loose": 1.0}]
    assert lines[3:] == [{"task": "suite", "group": ["gen"]}, {"task": "sub", "group": ["gen"]}]


def test_slm_compare_on_two_evaluated_runs(runs, capsys):
    (a, summary_a), (b, summary_b) = runs
    compare_main([str(a), str(b), "--draws", "500"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"A: {a}" and out[2].split()[:2] == ["task", "metric"]
    rows = {line.split()[0]: line for line in out[3:5]}
    assert set(rows) == set(TASKS)
    assert rows["slm_shakespeare_mc"].split()[1:3] == ["acc_norm", str(LIMIT)]  # lm-eval's default filter, unsaid
    assert "McNemar" in rows["slm_shakespeare_mc"] and "paired t" in rows["slm_shakespeare_bpb"]
    results, refused = compare_runs(a, b, draws=500)
    assert not refused
    for r in results:  # every document aligned: A and B are the runs' own lm-eval scores
        assert r.a == pytest.approx(summary_a["scores"][r.task]) and r.b == pytest.approx(summary_b["scores"][r.task])
        assert r.low <= r.diff <= r.high
    ppl = next(r for r in results if r.task == "slm_shakespeare_bpb")
    assert ppl.verdict == ("B better" if ppl.diff < 0 else "A better") or ppl.p >= 0.05

    same, _ = compare_runs(a, a, draws=500)
    assert all(r.diff == 0 and r.low == r.high == 0 and r.p == 1 for r in same)
    assert {r.verdict for r in same} == {"no detectable difference at 5%"}
    assert set(load_documents(a).tasks) == set(TASKS)


def test_the_report_pairs_each_familys_best_with_its_runner_up(runs, tmp_path):
    """Where the report names a family's best, it tests it against the runner-up on the documents both scored."""
    import shutil

    from analysis import collect
    from analysis.report import best_blocks

    for i, (run, _) in enumerate(runs):  # two configurations of one family (copies: the fixture stays as it is)
        copy = shutil.copytree(run, tmp_path / f"L{2 + i}")
        update_record(copy, model={"family": "llama3", "n_layers": 2 + i, "d_model": 48, "params_total": 1000})
    table = collect(tmp_path)
    frame = best_blocks(table, "score_slm_shakespeare_mc")[-1]
    cell = frame["paired test vs runner-up"].iloc[0]
    assert f"on {LIMIT} documents, McNemar p = " in cell, cell
