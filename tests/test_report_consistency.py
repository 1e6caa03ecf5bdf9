"""One number per question: the report of a sweep shaped like `make sweep`'s (a masked-diffusion run among exact
NLLs, decode speeds with their load, per-document results) quotes each statistic with one value wherever it
appears (its sections, the figures' captions, the claims table), words the winner by the metric's direction, and
shows the per-document test (these trained models) beside the untested seed question (the architectures), with
the p-value slm-compare gives for the same two runs."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from analysis import collect
from analysis.paired import compare_runs
from analysis.report import write_report
from analysis.study import analyse
from tests.test_analysis_verdict import default_study

TASK = "slm_shakespeare_bpb"


def _documents(run_dir, nll: float, rng) -> None:
    """Per-document bits per byte of the Shakespeare test text ([log-likelihood, bytes] per document), named in
    the run's result.json, and the decode load its throughput was measured under."""
    name = "eval/results_documents.jsonl"
    metrics = {"bits_per_byte,none": {"aggregation": "bits_per_byte", "higher_is_better": False}}
    lines = [{"task": TASK, "metrics": metrics}]
    for i in range(60):
        size = int(rng.integers(40, 80))
        lines.append({"task": TASK, "doc_id": i, "doc_hash": f"d{i}", "prompt_hash": f"p{i}",
                      "bits_per_byte,none": [-(nll + 0.3 * rng.standard_normal()) * size, size]})
    (run_dir / "eval").mkdir(exist_ok=True)
    (run_dir / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    record = json.loads((run_dir / "result.json").read_text())
    lm = record["eval"]["lm_eval"]
    lm["documents_file"] = name
    lm["details"]["slm_shakespeare_ppl"]["documents_file"] = name
    record["eval"]["throughput"]["other_cores_busy"] = float(rng.uniform(0.0, 1.8))
    (run_dir / "result.json").write_text(json.dumps(record))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = default_study(tmp_path_factory.mktemp("cpu_default"))
    rng = np.random.default_rng(3)
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        nll = json.loads((run_dir / "result.json").read_text())["eval"]["val_nll"]
        _documents(run_dir, nll, rng)
    table = collect(root)
    out = tmp_path_factory.mktemp("report")
    path, skipped = write_report(root, out, table=table)
    return table, (out / "report.md").read_text(), path.read_text(), skipped


def _values(pattern: str, text: str) -> set[str]:
    return set(re.findall(pattern, text))


def test_each_statistic_has_one_value_in_the_report(sweep):
    table, md, html, _ = sweep
    study = analyse(table)
    tiers, threshold = study.tiers(), study.threshold()
    # the tiers' 2-tier partition: its p in the section, the figure's caption and the claims table
    tier_p = _values(r"gaps not large against the spread within tiers: (p [=<] [\d.e-]+)", md)
    assert len(tier_p) == 1, tier_p
    assert md.count("gaps not large against the spread within tiers") >= 3  # section, caption, claims
    assert tier_p == {f"p = {tiers.two_tiers.gaps[0].p_value:.2g}"}
    # the width threshold: its permutation p in the section, the caption and the claims table
    permutation = _values(r"permutation (p [=<] [\d.e-]+)", md)
    assert len(permutation) == 1 and md.count("permutation p") >= 3, permutation
    assert permutation == {f"p = {threshold.p_value:.2g}"}
    # the same runs everywhere: the diffusion bound in none of the comparisons of exact NLLs
    # the verdict's ranking and the claims (an accuracy of the diffusion run, exact, still counts "10 of 12" at chance)
    configurations = _values(r"(?<!of )\b(\d+) configurations[,:]", md.split("## Appendix", 1)[0])
    assert configurations == {"11"}, configurations
    assert "1 diffusion run(s) left out" in md
    assert md == md.replace("dllm L4 d96 #", "")  # no unit of the dllm among the tiers' labels
    assert html.count("gaps not large against the spread within tiers") >= 3


def test_wording_follows_the_metric_s_direction(sweep):
    _, md, _, _ = sweep
    best = md.split("## Best configuration per family", 1)[1].split("\n## ", 1)[0]
    assert "lowest per family (lowest is best for val_nll)" in best and "highest" not in best


def test_one_nll_column_and_captions_that_agree_with_their_figures(sweep):
    _, md, _, skipped = sweep
    runs = md.split("## All runs", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in runs.splitlines() if line.startswith("| run |"))
    assert [c.strip() for c in header.split("|")].count("val NLL") == 1 and "val_nll" not in header
    # every record has its decode load: the caption gives it as the subtitle does, and never says it is unknown
    assert "does not say what else ran" not in md
    assert re.search(r"Other processes kept \d\.\d-\d\.\d cores busy while the CPU speeds were measured", md)
    # only what has data is drawn, and one line says so
    assert list(skipped) == ["lr"]
    (line,) = [t for t in md.splitlines() if t.startswith("Figures: ")]
    assert line.startswith("Figures: 6 of 7 plots drawn; not drawn: score against learning rate (")


def test_the_two_questions_each_with_its_test(sweep, tmp_path):
    """One seed: whether the architectures differ is untested; whether these trained models differ on the test
    documents is a per-document test, shown beside it with slm-compare's p for the same two runs."""
    table, md, _, _ = sweep
    verdict = analyse(table).verdict
    test = verdict.test("llama3_canon L2 d160", "lfm2 L4 d96")
    assert test.beyond is None and "architectures" in test.question  # seeds: untested
    doc = test.documents
    assert doc is not None and doc.test.startswith("paired t on 60 documents") and "trained models" in doc.question
    dirs = {label: table.at[runs[0], "run_dir"] for label, runs in zip(verdict.ranked["label"], verdict.ranked["runs"])}
    (result,), _ = compare_runs(dirs["lfm2 L4 d96"], dirs["llama3_canon L2 d160"], [TASK])
    assert result.p == doc.p and result.diff == pytest.approx(doc.diff)  # slm-compare: B - A, B the better-ranked
    assert "**Two questions.**" in md and "vs the next, per document (these trained models)" in md
    assert "per-document test (these trained models)" in md.split("## Appendix", 1)[1]
