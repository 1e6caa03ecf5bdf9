"""The report leads with what discriminates: the headline metric is chosen per study (the first
metric on which configurations differ beyond noise and from chance), the report opens with a verdict on it,
the figures are keyed (colour: family, marker: depth), the decode-speed plot states its device, load and
decoder settings, and the notebook's Pareto frontier follows the report's rule. Every input is built so the
right answer is known beforehand."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis import collect
from analysis.headline import choose_headline
from analysis.verdict import build_verdict
from tests.test_analysis_collect import make_record, write

WIDTH = {2: 160, 4: 96, 8: 64}
NLL = {("llama3_canon", 2): 1.75, ("llama3_canon", 4): 1.80, ("llama3_canon", 8): 1.88,
       ("llama3", 2): 1.87, ("llama3", 4): 2.03, ("llama3", 8): 2.15,
       ("gpt2", 2): 2.38, ("gpt2", 4): 2.42, ("gpt2", 8): 2.46,
       ("lfm2", 4): 1.76, ("moe", 4): 1.98, ("dllm", 4): 3.11}
"""The README's default study at 0.5M parameters (one seed): Canon ahead of LLaMA3, GPT-2 behind at every depth;
the dllm's 3.11 a NELBO."""
ABOVE_CHANCE = {("lfm2", 4), ("llama3_canon", 2)}
"""The two configurations whose multiple-choice accuracy (0.30 +- 0.0205) is beyond noise of chance 0.25; the
other ten sit at 0.26-0.28, within 1.96 x 0.0205 = 0.040 of it."""


def default_study(root, seeds=(0,), nll_noise: float = 0.0):
    """Runs shaped like `make sweep`'s cpu_default: 3 families x depth 2/4/8 + lfm2, moe, dllm at depth 4,
    offline scores (line-endings accuracy near chance, Shakespeare bits per byte without a stderr), decode speed
    measured on a CPU (1 thread), the dllm decoded by its sampler."""
    rng = np.random.default_rng(1)
    for (family, depth), nll in NLL.items():
        for seed in seeds:
            mc = 0.30 if (family, depth) in ABOVE_CHANCE else 0.26 + 0.01 * (depth % 3)
            value = nll + nll_noise * rng.standard_normal()
            record = make_record(family=family, n_layers=depth, d_model=WIDTH[depth], seed=seed, val_nll=value,
                                 scores={"slm_shakespeare_mc": (mc, 0.0205),
                                         "slm_shakespeare_ppl": (value / 0.69 * 0.6, None)},
                                 throughput=3000.0 / depth)
            record["eval"]["lm_eval"]["average_tasks"] = {"offline": ["slm_shakespeare_mc"]}
            record["eval"]["throughput"].update(torch_threads=1, prompt_tokens=64, new_tokens=64, batch_size=1,
                                                cuda_graph=False, compile=False, decoder="autoregressive")
            if family == "dllm":
                record["eval"]["val_nll_kind"] = "nelbo"
                record["config"]["train"]["objective"] = "mdlm"
                record["eval"]["throughput"].update(decoder="masked_diffusion", sampler={
                    "gen_length": 64, "block_length": 32, "steps": 16, "threshold": None,
                    "remasking": "low_confidence"})
            write(root / f"{family}_L{depth}_s{seed}", record)
    return root


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return collect(default_study(tmp_path_factory.mktemp("cpu_default")))


def test_the_headline_skips_a_task_at_chance_for_the_validation_nll(study):
    headline = choose_headline(study)
    assert headline.column == "val_nll"
    mc = headline.candidate("score_slm_shakespeare_mc")
    assert mc.at_chance and (mc.near_chance, mc.configurations) == (10, 12)  # the dllm's accuracy counts too
    assert [c.column for c in headline.at_chance] == ["score_slm_shakespeare_mc"]
    nll = headline.candidate("val_nll")
    assert nll.separates is None and nll.noise == "none"  # one seed, no stderr: not invented
    assert "line endings" in headline.why and "10 of 12" in headline.why and "noise is unknown" in headline.why


def test_an_explicit_score_is_kept(study):
    headline = choose_headline(study, "score_slm_shakespeare_mc")
    assert headline.column == "score_slm_shakespeare_mc" and headline.explicit
    assert "--score" in headline.why and "10 of 12" in headline.why
    with pytest.raises(KeyError, match="no column"):
        choose_headline(study, "score_nope")


def test_a_separating_accuracy_stays_the_headline(tmp_path):
    """Above chance and apart beyond noise: the first metric of the order is kept."""
    for family, (acc, nll) in {"gpt2": (0.40, 2.0), "llama3": (0.60, 2.1), "lfm2": (0.80, 1.9)}.items():
        write(tmp_path / family, make_record(family=family, val_nll=nll,
                                             scores={"slm_shakespeare_mc": (acc, 0.02)}))
    table = collect(tmp_path)
    headline = choose_headline(table)  # the offline average of an older record: its tasks unknown, no stderr
    assert headline.column == "score_slm_shakespeare_mc"
    assert headline.note == "Shakespeare line endings (offline average: noise unknown)"
    assert headline.candidate("score_slm_shakespeare_mc").separates is True
    headline = choose_headline(table.drop(columns=["avg_offline"]))
    assert headline.column == "score_slm_shakespeare_mc" and headline.note == ""


def test_with_seeds_the_nll_noise_comes_from_their_spread(tmp_path):
    table = collect(default_study(tmp_path, seeds=(0, 1, 2), nll_noise=0.01))
    nll = choose_headline(table).candidate("val_nll")
    assert nll.noise == "seeds" and nll.separates is True
    assert nll.max_z > nll.z_crit > 3  # Bonferroni over the 55 pairs of 11 configurations
    assert nll.pairs == 55


def test_the_verdict_opens_the_report_in_plain_words(study):
    from analysis.report import sections

    parts = sections(study, "results.parquet")
    heading, blocks = parts[0]
    assert heading == "Verdict"
    text = "\n".join(b for b in blocks if isinstance(b, str))
    assert text.startswith("Headline metric: **validation NLL**")
    assert "**Ranking** on validation NLL (lower is better; 11 configurations" in text
    assert "llama3_canon L2 d160 1.75, lfm2 L4 d96 1.76, llama3_canon L4 d96 1.8" in text
    assert "**Beyond noise:** not tested" in text
    # the README's sentence, from the data
    assert ("at every depth (2, 4, 8) the order is llama3_canon, llama3, gpt2 (best first): gpt2 is behind and "
            "llama3_canon ahead at every depth") in text
    assert "lfm2, moe: not run at every depth" in text
    assert "dllm L4 d96: its 3.11 is a NELBO" in text and "above every exact NLL" in text
    assert "Anything from Shakespeare line endings: 10 of 12" in text
    assert "Depth against width: they moved together" in text
    table = next(b for b in blocks if isinstance(b, pd.DataFrame))
    assert table["configuration"].tolist()[:3] == ["llama3_canon L2 d160", "lfm2 L4 d96", "llama3_canon L4 d96"]
    assert set(table["95% interval"]) == {"unknown"} and set(table["vs the next"]) <= {"untested", ""}
    assert len(table) == 11 and "dllm L4 d96" not in table["configuration"].tolist()
    headings = [h for h, _ in parts]
    assert headings[1] == "Tasks at chance" and headings[-1] == "Appendix: how the verdict was decided"
    # statistics in the appendix, not in the verdict
    assert "Bonferroni" not in text and "p =" not in text


def test_the_verdict_tests_differences_where_seeds_give_noise(tmp_path):
    table = collect(default_study(tmp_path, seeds=(0, 1, 2), nll_noise=0.01))
    v = build_verdict(table, choose_headline(table))
    lead = v.ranked["label"].iloc[0]
    assert lead == "llama3_canon L2 d160"
    assert v.test(lead, "lfm2 L4 d96").beyond is False          # 0.01 apart, se ~0.008
    assert v.test(lead, "gpt2 L8 d64").beyond is True            # 0.7 apart
    text = "\n".join(b for b in v.blocks() if isinstance(b, str))
    assert "within noise of it (lfm2 L4 d96" in text
    assert "gpt2 is behind" in text and "differences between neighbouring families at one depth are beyond noise" \
        in text
    appendix = v.appendix()
    tests = next(b for b in appendix if isinstance(b, pd.DataFrame) and "better-ranked" in b)
    m = len(tests)
    assert f"p < 0.05 / {m}" in "\n".join(b for b in appendix if isinstance(b, str))
    assert set(tests["test"].str.split(" =").str[0]) == {"z"}  # no per-document results here: unpaired


def test_seed_only_noise_gets_student_t_intervals(tmp_path):
    """3 seeds each: an interval is value ± t(2) se (4.30 se, not the normal 1.96 se), and an unpaired pair test
    takes Welch-Satterthwaite's degrees of freedom (4 for equal se on 2 + 2), as scipy's Welch t-test does."""
    from scipy.stats import ttest_ind

    table = collect(default_study(tmp_path, seeds=(0, 1, 2), nll_noise=0.01))
    v = build_verdict(table, choose_headline(table))
    lead = v.ranked.iloc[0]
    values = lead["seed_values"]
    se = values.std(ddof=1) / np.sqrt(3)
    assert lead["se_df"] == 2 and lead["se"] == pytest.approx(se)
    low, high = (float(x) for x in v.interval(lead).strip("[]").split(", "))
    assert (high - low) / 2 == pytest.approx(4.3027 * se, rel=0.02)  # printed to 3 figures; 1.96 se is half
    other = v.ranked.iloc[1]
    test = v.test(lead["label"], other["label"])
    welch = ttest_ind(values, other["seed_values"], equal_var=False)
    assert test.p == pytest.approx(welch.pvalue, rel=1e-6)
    assert "t with" in test.test


def _per_document(run_dir, correct: list[int]):
    """A per-document file for slm_shakespeare_mc (acc_norm 0/1 per document), named in result.json."""
    name = "eval/results_documents.jsonl"
    lines = [{"task": "slm_shakespeare_mc", "metrics": {"acc_norm,none": {"aggregation": "mean",
                                                                           "higher_is_better": True}}}]
    lines += [{"task": "slm_shakespeare_mc", "doc_id": i, "doc_hash": f"d{i}", "prompt_hash": f"p{i}",
               "acc_norm,none": float(c)} for i, c in enumerate(correct)]
    (run_dir / "eval").mkdir(exist_ok=True)
    (run_dir / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    record = json.loads((run_dir / "result.json").read_text())
    record["eval"]["lm_eval"]["documents_file"] = name
    record["eval"]["lm_eval"]["details"]["slm_shakespeare_mc"]["documents_file"] = name
    (run_dir / "result.json").write_text(json.dumps(record))


def test_the_verdict_pairs_runs_that_share_documents(tmp_path):
    """Two runs 0.05 apart with a stderr of 0.02 each: unpaired, z = 1.77, within noise; paired on the same 400
    documents where the better run is right on every document the other gets right plus 20 more: McNemar p tiny."""
    rng = np.random.default_rng(0)
    base = (rng.random(400) < 0.55).astype(int)
    better = base.copy()
    better[np.flatnonzero(base == 0)[:20]] = 1
    for family, correct in (("gpt2", base), ("llama3", better)):
        run = write(tmp_path / family, make_record(family=family, scores={
            "slm_shakespeare_mc": (float(correct.mean()), 0.02)}))
        _per_document(run, correct.tolist())
    table = collect(tmp_path)
    headline = choose_headline(table, "score_slm_shakespeare_mc")
    test = build_verdict(table, headline).test("llama3", "gpt2")
    assert test.test == "paired McNemar on 400 documents" and test.beyond is True
    assert test.diff == pytest.approx(0.05)
    unpaired = build_verdict(table, headline, paired=False).test("llama3", "gpt2")
    assert unpaired.test.startswith("z = 1.77") and unpaired.beyond is False


def test_a_diffusion_bound_is_off_the_frontier_in_bits_per_byte_too():
    """Tokenizers differ, so the loss compared is val_bpb; the dllm's is a bound as its val_nll is."""
    from analysis.thresholds import nll_frontier

    table = pd.DataFrame({"run": ["ar_small", "ar_big", "dllm"], "status": "completed",
                          "tokenizer": ["char", "gpt2", "char"], "train_flops": [1e12, 4e12, 5e11],
                          "val_nll": [2.0, 1.8, 1.0], "val_bpb": [2.9, 2.5, 1.4],
                          "val_nll_kind": ["nll", "nll", "nelbo"]})
    assert nll_frontier(table, y="val_bpb")["run"].tolist() == ["ar_small", "ar_big"]
    assert nll_frontier(table.assign(val_nll_kind="nelbo"), y="val_bpb")["run"].tolist() == ["dllm"]  # bounds only
    headline = choose_headline(table)
    assert headline.column == "val_bpb" and "NELBO" in headline.why
    assert build_verdict(table, headline).ranked["label"].str.contains("dllm").sum() == 0


def _seeded_runs(root, means: dict[int, float], spread: float | dict[int, float]):
    """3 seeds per configuration (n_layers -> mean val_nll), at mean - spread, mean, mean + spread (`spread`: one for
    all, or n_layers -> its own)."""
    from tests.test_analysis_collect import make_record, write

    for n_layers, mean in means.items():
        s = spread[n_layers] if isinstance(spread, dict) else spread
        for seed, step in enumerate((-s, 0.0, s)):
            write(root / f"L{n_layers}_s{seed}", make_record(n_layers=n_layers, seed=seed, val_nll=mean + step))
    return root


def test_within_noise_with_apart_intervals_says_why_and_no_tiers_under_a_clear_leader_says_why(tmp_path):
    """Bonferroni's bar is stricter than two 95% intervals apart: the verdict says so where it calls a pair within
    noise whose intervals do not overlap; a clear leader with no tier split says why both are true."""
    from analysis import collect
    from analysis.report import sections
    from analysis.study import analyse

    # the leader's seeds agree closely, L2's do not: 95% intervals [1.998, 2.002] and [2.01, 2.11] are apart, while
    # Welch's test of the difference (df about 2) is not beyond noise at 0.05 / the pairs tested
    means, spread = {1: 2.0, 2: 2.06, 3: 3.0, 4: 3.1}, {1: 0.001, 2: 0.02, 3: 0.001, 4: 0.001}
    table = collect(_seeded_runs(tmp_path / "a", means, spread))
    text = "\n".join(b for b in analyse(table, "val_nll").verdict.blocks() if isinstance(b, str))
    assert "within noise of it (L2)" in text.replace("L2 d128", "L2"), text
    assert "do not overlap the leader's, yet the difference is within noise" in text

    table = collect(_seeded_runs(tmp_path / "b", {1: 2.0, 2: 3.0, 3: 3.001, 4: 3.002}, 0.01))
    study = analyse(table, "val_nll")
    assert study.verdict.clear_leader and not study.tiers("val_nll").split
    (_, blocks), = [s for s in sections(table, "t.parquet", "val_nll", study=study) if s[0] == "Tiers"]
    assert any("both hold: the verdict's leader" in b for b in blocks if isinstance(b, str))
