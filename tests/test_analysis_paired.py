"""Paired comparisons (analysis/paired.py, slm-compare) on hand-written per-document files and synthetic data.
The files as an evaluation writes them are tests/test_eval_documents.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest

from analysis.cli import compare_main
from analysis.paired import (NO_DIFFERENCE, PairedError, compare_runs, load_documents, mcnemar, paired_difference,
                             paired_groups, paired_stats)
from slm.runs.record import update_record

ACC = {"acc,none": {"aggregation": "mean", "higher_is_better": True}}
BPB = {"bits_per_byte,none": {"aggregation": "bits_per_byte", "higher_is_better": False}}
DOCS = "eval/results_t_documents.jsonl"


def _run(path: Path, tasks: dict[str, tuple[dict, list[dict]]], groups: dict | None = None, name: str = DOCS,
         record: bool = True) -> Path:
    """A run dir whose result.json names a per-document file holding `tasks` ({task: (metrics, documents)});
    a document without doc_hash gets one from its doc_id."""
    lines = []
    for task, (metrics, docs) in tasks.items():
        lines.append({"task": task, "metrics": metrics, "documents": len(docs)})
        lines += [{"task": task, "doc_hash": f"h{d['doc_id']}", "prompt_hash": f"p{d['doc_id']}", **d} for d in docs]
    lines += [{"task": g, "group": members} for g, members in (groups or {}).items()]
    (path / name).parent.mkdir(parents=True, exist_ok=True)
    (path / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    if record:
        metrics = {t: next(iter(m)) for t, (m, _) in tasks.items()}
        update_record(path, status="completed", eval={"lm_eval": {
            "metrics": metrics, "documents_file": name,
            "details": {t: {"documents_file": name} for t in [*tasks, *(groups or {})]}}})
    return path


def _acc(values) -> tuple[dict, list[dict]]:
    return ACC, [{"doc_id": i, "acc,none": float(v)} for i, v in enumerate(values)]


def _bpb(lls, nbytes) -> tuple[dict, list[dict]]:
    return BPB, [{"doc_id": i, "bits_per_byte,none": [ll, n]} for i, (ll, n) in enumerate(zip(lls, nbytes))]


def _table(n01: int, n10: int, n11: int = 20, n00: int = 15) -> tuple[np.ndarray, np.ndarray]:
    a = np.array([0] * n01 + [1] * n10 + [1] * n11 + [0] * n00, dtype=float)
    b = np.array([1] * n01 + [0] * n10 + [1] * n11 + [0] * n00, dtype=float)
    return a, b


def test_mcnemar_is_the_exact_binomial_test_of_the_discordant_pairs():
    n01, n10, p = mcnemar(*_table(2, 9))
    assert (n01, n10) == (2, 9)
    assert p == pytest.approx(2 * (1 + 11 + 55) / 2 ** 11, abs=1e-12)  # 2 * P(X <= 2), X ~ Bin(11, 1/2)
    assert p == pytest.approx(binomtest(2, 11, 0.5).pvalue)
    assert mcnemar(*_table(9, 2))[2] == p
    assert mcnemar(*_table(0, 0)) == (0, 0, 1.0)
    r = paired_stats(*_table(2, 9))
    assert r.test == "McNemar exact" and r.p == p and r.verdict == NO_DIFFERENCE  # 0.065
    r = paired_stats(*_table(1, 12))
    assert r.p < 0.05 and r.diff == pytest.approx(-11 / 48) and r.verdict == "A better"


@pytest.mark.parametrize("values", [np.array([0, 1, 1, 0, 1], dtype=float), np.linspace(-3, 2, 40)])
def test_an_identical_pair_differs_by_nothing(values):
    r = paired_stats(values, values.copy())
    assert r.diff == 0 and (r.low, r.high) == (0, 0) and r.p == 1 and r.verdict == NO_DIFFERENCE


def test_the_bootstrap_interval_covers_a_known_shift():
    shift, covered = 0.3, 0
    for rep in range(100):
        rng = np.random.default_rng(rep)
        a = rng.normal(0, 1, 200)
        b = a + shift + rng.normal(0, 1, 200)
        r = paired_stats(a, b, draws=500, seed=rep)
        covered += r.low <= shift <= r.high
    assert 88 <= covered <= 99  # a 95% interval
    rng = np.random.default_rng(0)
    a = rng.normal(0, 1, 500)
    b = a + shift + rng.normal(0, 1, 500)
    r = paired_stats(a, b)
    assert r.test == "paired t" and r.low < shift < r.high and 0.1 < r.high - r.low < 0.3
    assert r.p < 1e-6 and r.p_wilcoxon < 1e-6 and r.verdict == "B better"
    assert paired_stats(a, b, higher_is_better=False).verdict == "A better"
    assert paired_stats(a, b).low == r.low and paired_stats(a, b, seed=1).low != r.low  # the seed fixes the draws


def test_perplexities_aggregate_as_lm_eval_does():
    ll_a, ll_b, n = np.array([-700.0, -800.0, -650.0]), np.array([-690.0, -795.0, -640.0]), np.array([500, 600, 450])
    r = paired_stats(ll_a, ll_b, n, "bits_per_byte", False)
    assert r.a == pytest.approx(-ll_a.sum() / n.sum() / math.log(2))
    assert r.b == pytest.approx(-ll_b.sum() / n.sum() / math.log(2))
    assert r.diff < 0 and r.high < 0 and r.test == "paired t" and r.p < 0.05 and r.verdict == "B better"
    r = paired_stats(ll_a, ll_b, n, "weighted_perplexity", False)
    assert r.a == pytest.approx(math.exp(-ll_a.sum() / n.sum()))
    with pytest.raises(PairedError, match="supports? mean"):
        paired_stats(ll_a, ll_b, n, "f1_score")


def test_compare_runs_aligns_documents_and_reports_each_task(tmp_path):
    a = _run(tmp_path / "a", {"mc": _acc([1, 0, 0, 1, 0, 0]), "ppl": _bpb([-10, -20], [8, 16])})
    b = _run(tmp_path / "b", {"mc": _acc([1, 1, 1, 1, 0]), "ppl": _bpb([-9, -19], [8, 16])})
    results, refused = compare_runs(a, b)
    assert not refused and [r.task for r in results] == ["mc", "ppl"]
    mc = results[0]
    assert (mc.n, mc.a, mc.b, mc.n01, mc.n10, mc.only_a, mc.only_b) == (5, 0.4, 0.8, 2, 0, 1, 0)
    assert mc.p == pytest.approx(0.5) and mc.metric == "acc,none" and mc.verdict == NO_DIFFERENCE
    ppl = results[1]
    assert ppl.metric == "bits_per_byte,none" and ppl.diff == pytest.approx(-2 / 24 / math.log(2))
    assert ppl.p == 0.0 and ppl.verdict == "B better"  # both documents gained exactly 1 nat: no spread
    with pytest.raises(PairedError, match="no per-document metric 'acc_norm'; it has acc,none"):
        paired_difference(a, b, "mc", metric="acc_norm")
    assert paired_difference(a, b, "mc", metric="acc") == mc


@pytest.mark.parametrize("field, what", [("doc_hash", "different documents"), ("prompt_hash", "different prompts")])
def test_a_task_scored_on_other_documents_is_refused(tmp_path, field, what):
    a = _run(tmp_path / "a", {"mc": _acc([1, 0, 1]), "other": _acc([1, 0])})
    metrics, docs = _acc([1, 1, 1])
    docs[2][field] = "changed"
    b = _run(tmp_path / "b", {"mc": (metrics, docs), "other": _acc([0, 0])})
    results, refused = compare_runs(a, b)
    assert [r.task for r in results] == ["other"]
    assert refused["mc"].startswith(f"task mc: refused: the runs scored {what}")
    assert f"{field} differs for 1 of 3 documents (first: doc_id 2)" in refused["mc"]
    with pytest.raises(PairedError, match="refused"):
        paired_difference(a, b, "mc")


def test_a_group_pools_its_tasks_documents(tmp_path):
    a = _run(tmp_path / "a", {"x": _acc([1, 0]), "y": _acc([0, 0, 0])}, groups={"suite": ["x", "y"]})
    b = _run(tmp_path / "b", {"x": _acc([1, 1]), "y": _acc([1, 1, 0])}, groups={"suite": ["x", "y"]})
    r = paired_difference(a, b, "suite")
    assert (r.n, r.a, r.b, r.n01, r.n10) == (5, 0.2, 0.8, 3, 0)
    results, _ = compare_runs(a, b)
    assert [t.task for t in results] == ["x", "y", "suite"]


def test_groups_of_runs_are_pooled_per_document(tmp_path):
    a1 = _run(tmp_path / "a1", {"mc": _acc([1, 0, 0, 0])})
    a2 = _run(tmp_path / "a2", {"mc": _acc([1, 1, 0, 0])})
    b1 = _run(tmp_path / "b1", {"mc": _acc([1, 1, 1, 0])})
    b2 = _run(tmp_path / "b2", {"mc": _acc([1, 1, 1, 1])})
    r = paired_groups([a1, a2], [b1, b2], "mc", draws=500)
    assert (r.n, r.runs_a, r.runs_b, r.a, r.b) == (4, 2, 2, 0.375, 0.875)  # each group's mean accuracy
    assert r.test == "paired t" and r.diff == pytest.approx(0.5)
    assert paired_groups([a1], [b1], "mc", draws=500) == paired_difference(a1, b1, "mc", draws=500)
    c = _run(tmp_path / "c", {"mc": _acc([1, 0, 0])})
    assert paired_groups([a1, c], [b1], "mc", draws=500).only_a == 1  # doc 3: not scored by every run


def test_a_task_is_read_from_the_file_of_its_own_evaluation(tmp_path):
    run = _run(tmp_path / "a", {"mc": _acc([1, 0])}, name="eval/old_documents.jsonl")
    _run(run, {"ppl": _bpb([-1.0], [4])}, name="eval/new_documents.jsonl", record=False)
    update_record(run, eval={"lm_eval": {"metrics": {"mc": "acc,none"}, "documents_file": "eval/new_documents.jsonl",
                                         "details": {"mc": {"documents_file": "eval/old_documents.jsonl"},
                                                     "ppl": {"documents_file": "eval/new_documents.jsonl"}}}})
    docs = load_documents(run)
    assert docs.tasks["mc"].file.name == "old_documents.jsonl" and docs.tasks["ppl"].file.name == "new_documents.jsonl"
    assert docs.headline == {"mc": "acc,none"} and docs.requested == ["mc", "ppl"]
    (run / "eval/old_documents.jsonl").unlink()
    with pytest.raises(PairedError, match="old_documents.jsonl: the per-document file named in .* is missing"):
        load_documents(run)


def test_slm_compare_prints_a_line_per_task(tmp_path, capsys):
    a = _run(tmp_path / "a", {"mc": _acc([0] * 30 + [1] * 10), "ppl": _bpb([-10, -20, -30], [8, 16, 20])})
    b = _run(tmp_path / "b", {"mc": _acc([1] * 30 + [1] * 10), "ppl": _bpb([-10, -20, -30], [8, 16, 20])})
    compare_main([str(a), str(b)])
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"A: {a}", f"B: {b}"]
    assert out[2].split() == ["task", "metric", "docs", "A", "B", "B-A", "95%", "interval", "test", "p", "verdict"]
    assert out[3].split()[:6] == ["mc", "acc", "40", "0.2500", "1.0000", "+0.75"]  # lm-eval's filter "none" off
    assert "McNemar 30:0" in out[3] and out[3].endswith("B better")
    assert out[4].split()[:3] == ["ppl", "bits_per_byte", "3"] and out[4].endswith(NO_DIFFERENCE)
    # which question a per-document test answers, and which needs seeds
    assert any(line.startswith("What this answers: whether these two trained models differ on these documents")
               and "architectures differ needs seeds" in line for line in out)
    compare_main([str(a), str(b), "--task", "ppl", "--json", "--draws", "200"])
    data = json.loads(capsys.readouterr().out)
    assert [r["task"] for r in data["results"]] == ["ppl"] and data["results"][0]["p"] == 1.0
    assert data["results"][0]["verdict"] == NO_DIFFERENCE and data["results"][0]["draws"] == 200


def _error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        compare_main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("slm-compare: error: ") and "\n" not in err
    return err


def test_slm_compare_refusals_are_one_line(tmp_path, capsys):
    a = _run(tmp_path / "a", {"mc": _acc([1, 0])})
    other = _run(tmp_path / "o", {"ppl": _bpb([-1.0], [4])})
    (tmp_path / "bare").mkdir()
    old = tmp_path / "old"
    update_record(old, status="completed", eval={"val_nll": 4.0, "lm_eval": {"scores": {"mc": 0.5}}})
    assert "missing: no such run or checkpoint directory, here or under" in _error(capsys, [str(tmp_path / "missing"),
                                                                                         str(a)])
    assert "bare: not a run directory (no result.json" in _error(capsys, [str(a), str(tmp_path / "bare")])
    err = _error(capsys, [str(old), str(a)])
    assert "no per-document results" in err and "predates" in err and f"re-run `slm-eval {old}" in err
    assert "no task in common" in _error(capsys, [str(a), str(other)])
    assert "task nope: not in both runs" in _error(capsys, [str(a), str(a), "--task", "nope"])
    assert "no per-document metric 'f1'" in _error(capsys, [str(a), str(a), "--metric", "f1"])
    assert "--draws 10: must be >= 100" in _error(capsys, [str(a), str(a), "--draws", "10"])
    metrics, docs = _acc([1, 0])
    docs[0]["doc_hash"] = "x"
    changed = _run(tmp_path / "c", {"mc": (metrics, docs)})
    assert "task mc: refused: the runs scored different documents" in _error(capsys, [str(a), str(changed)])
    (changed / DOCS).write_text("not json\n")
    assert f"{changed / DOCS}: line 1 is not a per-document line" in _error(capsys, [str(a), str(changed)])


def test_a_run_scored_under_a_tasks_former_name_pairs_with_one_under_today_s(tmp_path):
    """slm_shakespeare_ppl became slm_shakespeare_bpb (RENAMED_TASKS): both names, in the files and on
    the command line, mean the same task."""
    old = _run(tmp_path / "old", {"slm_shakespeare_ppl": _bpb([-10, -20], [8, 16])})
    new = _run(tmp_path / "new", {"slm_shakespeare_bpb": _bpb([-9, -19], [8, 16])})
    for asked in (None, ["slm_shakespeare_ppl"], ["slm_shakespeare_bpb"]):
        results, refused = compare_runs(old, new, asked)
        assert not refused and [r.task for r in results] == ["slm_shakespeare_bpb"]
        assert results[0].diff == pytest.approx(-2 / 24 / math.log(2))
    assert paired_difference(new, old, "slm_shakespeare_ppl").diff == pytest.approx(2 / 24 / math.log(2))
